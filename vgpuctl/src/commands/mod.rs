//! One module per `vgpuctl` command (commands that share everything share a module), each a
//! function that takes the [`crate::service::Session`] and the command's arguments and
//! prints its output. `main` only dispatches.

pub mod apply;
pub mod attach;
pub mod autostart;
pub mod create;
pub mod destroy;
pub mod events;
pub mod generate;
pub mod hostdev;
pub mod import;
pub mod install_hook;
pub mod jobs;
pub mod list;
pub mod parents;
pub mod permissions;
pub mod probe;
pub mod profiles;
pub mod schedule;
pub mod show;
pub mod sriov;
pub mod start_stop;
pub mod status;
pub mod telemetry;
pub mod types;

#[cfg(test)]
mod sent_options_tests;
