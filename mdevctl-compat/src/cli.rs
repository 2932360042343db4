//! Command line of the mdevctl-compatible command: mdevctl 1.4's subcommands and options,
//! in every spelling libvirt uses (`--opt=value`, `--opt value`, `-u U`). A usage error exits
//! 2 as mdevctl's does; `--help` anywhere (libvirt's `modify --defined --live --jsonfile b
//! --help` probe) prints help and exits 0.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
// mdevctl reads `--uuid` with the `uuid` crate, which also takes the 32-digit, braced and URN
// spellings; so does this command (`parse_any_spelling`), naming the device in the one
// hyphenated form.
use vgpu_types::Uuid;

/// mdevctl, backed by the mdev-manager service over D-Bus.
#[derive(Debug, Parser)]
#[command(
    name = "mdevctl",
    version,
    about = "A mediated device management utility for Linux (mdevctl-compatible, backed by mdev-manager)"
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Define a persistent mediated device.
    Define(Define),
    /// Undefine a persistent mediated device.
    Undefine(Undefine),
    /// Modify the definition of a mediated device.
    Modify(Modify),
    /// Start a mediated device.
    Start(Start),
    /// Stop a mediated device.
    Stop(Stop),
    /// List mediated devices.
    List(List),
    /// List mdev types.
    Types(Types),
    /// Start the parent's devices marked for automatic start (udev rule).
    StartParentMdevs(StartParentMdevs),
}

/// `define`.
#[derive(Debug, Args)]
pub struct Define {
    /// UUID of the device.
    #[arg(short, long, value_parser = Uuid::parse_any_spelling, required_unless_present("parent"))]
    pub uuid: Option<Uuid>,
    /// Start the device automatically when its parent appears.
    #[arg(short, long)]
    pub auto: bool,
    /// Parent of the device.
    #[arg(short, long, required_unless_present("uuid"))]
    pub parent: Option<String>,
    /// mdev type of the device.
    #[arg(id = "type", short, long)]
    pub mdev_type: Option<String>,
    /// Device details in JSON (`mdev_type`, `start`, `attrs`).
    #[arg(long, conflicts_with_all(["type", "auto"]))]
    pub jsonfile: Option<PathBuf>,
    /// Accepted for compatibility (mdev-manager runs no callout scripts).
    #[arg(short, long)]
    pub force: bool,
}

/// `undefine`.
#[derive(Debug, Args)]
pub struct Undefine {
    /// UUID of the device.
    #[arg(short, long, value_parser = Uuid::parse_any_spelling)]
    pub uuid: Uuid,
    /// Parent of the device.
    #[arg(short, long)]
    pub parent: Option<String>,
    /// Accepted for compatibility.
    #[arg(short, long)]
    pub force: bool,
}

/// `modify`.
#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("modification")
        .required(true)
        .args(["auto", "manual", "addattr", "delattr", "jsonfile"]),
))]
pub struct Modify {
    /// UUID of the device.
    #[arg(short, long, value_parser = Uuid::parse_any_spelling)]
    pub uuid: Uuid,
    /// Parent of the device.
    #[arg(short, long)]
    pub parent: Option<String>,
    /// New mdev type.
    #[arg(id = "type", short, long)]
    pub mdev_type: Option<String>,
    /// Add an attribute (at the end, or at `--index`).
    #[arg(long, requires("value"), value_name = "attr_name")]
    pub addattr: Option<String>,
    /// Delete an attribute (the last one, or the one at `--index`).
    #[arg(long)]
    pub delattr: bool,
    /// Attribute index.
    #[arg(short, long)]
    pub index: Option<u32>,
    /// Attribute value.
    #[arg(
        long,
        requires("addattr"),
        conflicts_with("delattr"),
        value_name = "attr_value"
    )]
    pub value: Option<String>,
    /// Start automatically.
    #[arg(short, long, conflicts_with_all(["index", "value"]))]
    pub auto: bool,
    /// Start manually.
    #[arg(short, long, conflicts_with_all(["index", "value"]))]
    pub manual: bool,
    /// Modify the running device (with `--jsonfile`).
    #[arg(short, long, requires("jsonfile"), conflicts_with_all(["type", "index", "value"]))]
    pub live: bool,
    /// Modify the stored definition.
    #[arg(short, long)]
    pub defined: bool,
    /// Device details in JSON.
    #[arg(long, conflicts_with_all(["type", "index", "value"]))]
    pub jsonfile: Option<PathBuf>,
    /// Accepted for compatibility.
    #[arg(short, long)]
    pub force: bool,
}

/// `start`.
#[derive(Debug, Args)]
pub struct Start {
    /// UUID of the device.
    #[arg(short, long, value_parser = Uuid::parse_any_spelling)]
    pub uuid: Option<Uuid>,
    /// Parent of the device.
    #[arg(short, long)]
    pub parent: Option<String>,
    /// mdev type of the device.
    #[arg(id = "type", short, long)]
    pub mdev_type: Option<String>,
    /// Device details in JSON.
    #[arg(long, conflicts_with("type"))]
    pub jsonfile: Option<PathBuf>,
    /// Accepted for compatibility.
    #[arg(short, long)]
    pub force: bool,
}

/// `stop`.
#[derive(Debug, Args)]
pub struct Stop {
    /// UUID of the device.
    #[arg(short, long, value_parser = Uuid::parse_any_spelling)]
    pub uuid: Uuid,
    /// Accepted for compatibility.
    #[arg(short, long)]
    pub force: bool,
}

/// `list`.
#[derive(Debug, Args)]
pub struct List {
    /// List definitions instead of running devices.
    #[arg(short, long)]
    pub defined: bool,
    /// JSON output.
    #[arg(long)]
    pub dumpjson: bool,
    /// Show attributes.
    #[arg(short, long)]
    pub verbose: bool,
    /// Only this UUID.
    #[arg(short, long, value_parser = Uuid::parse_any_spelling)]
    pub uuid: Option<Uuid>,
    /// Only this parent.
    #[arg(short, long)]
    pub parent: Option<String>,
}

/// `types`.
#[derive(Debug, Args)]
pub struct Types {
    /// Only this parent.
    #[arg(short, long)]
    pub parent: Option<String>,
    /// JSON output.
    #[arg(long)]
    pub dumpjson: bool,
}

/// `start-parent-mdevs`.
#[derive(Debug, Args)]
pub struct StartParentMdevs {
    /// The parent device (its sysfs name).
    pub parent: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

    fn start_uuid(text: &str) -> Result<Uuid, clap::Error> {
        match Cli::try_parse_from(["mdevctl", "start", "--uuid", text])?.command {
            Command::Start(start) => Ok(start.uuid.expect("a --uuid was given")),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn uuid_options_take_every_spelling_mdevctl_takes_and_name_the_hyphenated_form() {
        for text in [
            UUID.to_owned(),
            UUID.to_ascii_uppercase(),
            UUID.replace('-', ""),
            format!("{{{UUID}}}"),
            format!("urn:uuid:{UUID}"),
        ] {
            let uuid = start_uuid(&text).unwrap_or_else(|error| panic!("{text}: {error}"));
            assert_eq!(uuid.to_string(), UUID, "{text}");
        }
    }

    #[test]
    fn a_malformed_uuid_option_is_a_usage_error_naming_the_input() {
        let error = start_uuid("83b8f4f2-509f").unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("83b8f4f2-509f"), "{error}");
    }
}
