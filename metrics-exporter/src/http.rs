//! A minimal HTTP/1.1 server for one resource: `GET /metrics` answers the exposition of a
//! fresh reading (`503` naming the failure when the service cannot be read), `/` a pointer to
//! it, anything else `404`. One request per connection (`Connection: close`); requests are
//! served one after another, which is all a scraper needs.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use vgpu_types::error_chain;

use crate::{read, render};

/// Longest a client may take to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;

/// The exposition format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves until the process ends.
pub async fn serve(listener: TcpListener, connection: zbus::Connection) -> anyhow::Result<()> {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                eprintln!("mdev-manager-exporter: accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if let Err(error) = handle(stream, &connection).await {
            eprintln!("mdev-manager-exporter: request failed: {error}");
        }
    }
}

async fn handle(stream: TcpStream, connection: &zbus::Connection) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head"))??;
    let mut words = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => match read::read(connection).await {
            Ok(reading) => ("200 OK", CONTENT_TYPE, render::render(&reading)),
            Err(error) => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                format!("{}\n", error_chain(&error)),
            ),
        },
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/html; charset=utf-8",
            "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n".to_string(),
        ),
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".into(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        response.extend_from_slice(body.as_bytes());
    }
    let stream = stream.get_mut();
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// Reads up to the blank line ending the request head.
async fn read_head(stream: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    let mut head = String::new();
    loop {
        let before = head.len();
        let read = stream.read_line(&mut head).await?;
        let line = &head[before..];
        if read == 0 || line == "\r\n" || line == "\n" {
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "request head too long",
            ));
        }
    }
}
