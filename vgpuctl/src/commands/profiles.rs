//! `vgpuctl profiles [--fit]`: the profiles instances can be created from, or whether each
//! fits this host now.

use dbus_api::options::NoOptions;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{manager, snapshot, Sent, Session};
use crate::table;

/// `vgpuctl profiles` (`fit`: `--fit`).
pub async fn profiles(session: &Session, fit: bool) -> Result<(), Failure> {
    if fit {
        return fit_profiles(session).await;
    }
    let snapshot = snapshot(&session.connection).await?;
    if session.json {
        return print_json(&snapshot.profiles);
    }
    table::print(
        &["PROFILE", "DESCRIPTION"],
        snapshot
            .profiles
            .iter()
            .map(|p| vec![p.name.clone(), p.description.clone()]),
    );
    Ok(())
}

/// `vgpuctl profiles --fit`.
async fn fit_profiles(session: &Session) -> Result<(), Failure> {
    let sent = Sent::new(&NoOptions::default());
    let fits = manager(&session.connection)
        .await?
        .fit_profiles(sent.proxy())
        .await
        .map_err(ClientError::from)?;
    if session.json {
        return print_json(&fits);
    }
    table::print(
        &["PROFILE", "FITS", "WHERE OR WHY NOT"],
        fits.iter().map(|f| {
            vec![
                f.name.clone(),
                if f.fits { "yes" } else { "no" }.to_string(),
                f.detail.clone(),
            ]
        }),
    );
    Ok(())
}
