//! The command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Manage vGPU instances (VFIO mediated devices and SR-IOV VFs) through the mdev-manager
/// service.
///
/// Exit status: 0 success, 1 failed, 2 usage error, 3 not found, 4 no capacity,
/// 5 not authorized, 6 in use, 7 already exists, 8 invalid arguments, 9 not supported,
/// 10 busy, 11 timed out, 12 cancelled, 69 service or bus unavailable.
#[derive(Debug, Parser)]
#[command(name = "vgpuctl", version)]
pub struct Cli {
    /// Print JSON (the stable format documented in vgpuctl(1) and docs/vgpuctl.md).
    #[arg(long, global = true)]
    pub json: bool,
    /// Talk to the service on the session bus.
    #[arg(long, global = true, conflicts_with = "address")]
    pub session: bool,
    /// Talk to the service on the bus at this D-Bus address (default: the system bus, or
    /// $DBUS_SYSTEM_BUS_ADDRESS).
    #[arg(long, global = true, value_name = "ADDR")]
    pub address: Option<String>,
    /// Never ask for a password; fail with "not authorized" instead.
    #[arg(long, global = true)]
    pub no_ask: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `create --placement`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Placement {
    /// Fill the busiest parent that still has room.
    Pack,
    /// Take the idlest parent.
    Spread,
}

impl Placement {
    /// The `placement` option's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Pack => dbus_api::names::placement::PACK,
            Placement::Spread => dbus_api::names::placement::SPREAD,
        }
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the profiles instances can be created from.
    Profiles {
        /// Say for each profile whether it fits this host now (where it would go) or why not.
        #[arg(long)]
        fit: bool,
    },
    /// List the parent devices (GPUs) and how they can be split.
    Parents,
    /// Show what NVIDIA's `nvidia-smi vgpu -q` reports per running vGPU: VM, framebuffer used,
    /// utilization, licence state.
    Telemetry,
    /// List the mdev types, of every parent or of one.
    Types {
        /// Parent name or PCI address (`0000:3b:00.0`).
        parent: Option<String>,
    },
    /// List the instances.
    List,
    /// Create instances from a profile; prints their UUIDs.
    Create {
        /// Profile name (see `vgpuctl profiles`).
        profile: String,
        /// Place them on this parent instead of choosing automatically.
        #[arg(long)]
        parent: Option<String>,
        /// Use this UUID (only with a count of 1).
        #[arg(long)]
        uuid: Option<String>,
        /// How many to create (all or none).
        #[arg(long)]
        count: Option<u32>,
        /// Keep the definition and recreate it whenever the service starts.
        #[arg(long)]
        autostart: bool,
        /// Scheduling weight.
        #[arg(long)]
        weight: Option<u32>,
        /// How to choose among the parents that fit: `pack` fills the busiest one first
        /// (keeps whole GPUs free), `spread` takes the idlest (default: the service's
        /// configured placement, `pack` unless set).
        #[arg(long, value_enum)]
        placement: Option<Placement>,
        /// Prefer parents on this NUMA node.
        #[arg(long, value_name = "NODE")]
        numa_node: Option<u32>,
        /// Accept only parents on --numa-node (fail naming the node if none has room).
        #[arg(long, requires = "numa_node")]
        numa_strict: bool,
        /// Pass-through profile: take the GPU's IOMMU group even if a member of it serves the
        /// host (a NIC, a disk controller, the console) or is not a function of the GPU. Needs
        /// the polkit action org.mdevmanager.vgpu1.force.
        #[arg(long)]
        force: bool,
        /// Run as a job that first waits up to SECS seconds for the parent to appear (VFs being
        /// enabled, a driver loading), then creates; fails with "timed out" naming the parent.
        /// Ctrl-C (or SIGTERM) while waiting cancels the job (nothing is created, exit status
        /// 12); a second one stops waiting at once.
        #[arg(long, value_name = "SECS")]
        wait_for_parent: Option<u32>,
        /// Run as a job and print its path at once instead of waiting for it (see `vgpuctl
        /// jobs`, `vgpuctl job cancel`).
        #[arg(long)]
        no_wait: bool,
    },
    /// Destroy instances (all UUIDs are checked before any is destroyed).
    Destroy {
        /// UUIDs.
        #[arg(required = true)]
        uuids: Vec<String>,
        /// Also when a VM holds it or the service did not create it.
        #[arg(long)]
        force: bool,
        /// Start one destroy job per instance (`Instance.StartDestroy`) and print their paths
        /// at once instead of waiting (see `vgpuctl jobs`). Each job checks its instance
        /// itself: one can fail while the others succeed.
        #[arg(long)]
        no_wait: bool,
    },
    /// Create the device of a persistent, stopped instance.
    Start {
        /// UUID.
        uuid: String,
    },
    /// Remove the device of a persistent instance, keeping its definition.
    Stop {
        /// UUID.
        uuid: String,
    },
    /// Turn autostart on or off.
    Autostart {
        /// UUID.
        uuid: String,
        /// `on` or `off`.
        state: OnOff,
    },
    /// Show one instance.
    Show {
        /// UUID (or a VF's PCI address).
        uuid: String,
    },
    /// Set the number of SR-IOV VFs of a parent and wait until done (the change cannot be
    /// cancelled: Ctrl-C says so and keeps waiting, a second Ctrl-C stops waiting).
    Sriov {
        /// PF name or PCI address.
        parent: String,
        /// Number of VFs.
        #[arg(long)]
        vfs: u32,
        /// Also remove VFs held by instances the service did not create.
        #[arg(long)]
        force: bool,
        /// Print the job's path at once instead of waiting for it.
        #[arg(long)]
        no_wait: bool,
    },
    /// Make the host match a desired-state file (docs/apply.md): prints the plan, then applies
    /// it all or nothing (rolled back on a failure).
    Apply {
        /// The file (`-`: standard input).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
        /// The configuration in the file (formats with several; empty for TOML).
        #[arg(short = 'c', long = "config", value_name = "NAME", default_value = "")]
        config: String,
        /// The file's format: `toml`, `nvidia-vgpu-dm` (NVIDIA vgpu-device-manager YAML) or
        /// `auto` (vgpu-device-manager when the file starts with `version:`, else TOML).
        #[arg(long, value_name = "FORMAT", default_value = "auto")]
        format: String,
        /// Print the plan only.
        #[arg(long)]
        dry_run: bool,
        /// Also remove instances a VM holds or the service did not create (polkit action
        /// org.mdevmanager.vgpu1.force).
        #[arg(long)]
        force: bool,
    },
    /// Exit 0 when the host matches a desired-state file, else non-zero printing the
    /// difference.
    Assert {
        /// The file (`-`: standard input).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
        /// The configuration in the file (formats with several; empty for TOML).
        #[arg(short = 'c', long = "config", value_name = "NAME", default_value = "")]
        config: String,
        /// The file's format: `toml`, `nvidia-vgpu-dm` (NVIDIA vgpu-device-manager YAML) or
        /// `auto` (vgpu-device-manager when the file starts with `version:`, else TOML).
        #[arg(long, value_name = "FORMAT", default_value = "auto")]
        format: String,
    },
    /// List the running jobs (long operations of the service).
    Jobs,
    /// Act on a running job.
    Job {
        /// What to do.
        #[command(subcommand)]
        action: JobAction,
    },
    /// Follow the service's change signals live, one line (or JSON object) per event.
    Events {
        /// Exit after this many events.
        #[arg(long)]
        count: Option<usize>,
    },
    /// Print the libvirt <hostdev> XML for an instance.
    Xml {
        /// UUID.
        uuid: String,
        /// mdev only: display='on' (QEMU shows the vGPU's framebuffer; needs a graphics device).
        #[arg(long)]
        display: bool,
        /// mdev only: ramfb='on' (boot display for a vGPU that is the primary display).
        #[arg(long)]
        ramfb: bool,
    },
    /// Print the QEMU arguments that give a plain QEMU (no libvirt) an instance.
    QemuArgs {
        /// UUID of an mdev, or PCI address of a VF or pass-through GPU.
        target: String,
    },
    /// Set an instance's scheduling weight, and optionally its guarantee and cap.
    Weight {
        /// UUID.
        uuid: String,
        /// Weight 1..=10000 (default 100), proportional among the parent's instances.
        weight: u32,
        /// Guarantee in percent of the GPU (`25`, `12.5%`; `none` clears it).
        #[arg(long)]
        min: Option<String>,
        /// Cap in percent of the GPU (`none` clears it).
        #[arg(long)]
        max: Option<String>,
    },
    /// Set a parent's scheduling policy, period or time slice; `schedule show` lists them.
    #[command(args_conflicts_with_subcommands = true)]
    Schedule {
        /// `show`.
        #[command(subcommand)]
        action: Option<ScheduleAction>,
        /// Parent name or PCI address.
        parent: Option<String>,
        /// Policy.
        #[arg(long, value_parser = ["best-effort", "equal-share", "fixed-share", "weighted"])]
        policy: Option<String>,
        /// Period (`100ms`, `20ms`, `1s`).
        #[arg(long)]
        period: Option<String>,
        /// Longest run before a switch (`2ms`, `500us`; `default` for the backend's own).
        #[arg(long)]
        slice: Option<String>,
    },
    /// Bring mdevctl's definitions (/etc/mdevctl.d) under management as adopted, persistent
    /// instances (running devices stay as they are); reports imported, skipped and why.
    ImportMdevctl {
        /// Report what would be imported; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show what the caller may do (per polkit action: yes, auth, no).
    Permissions,
    /// Show the service version, features and the last reconcile report.
    Status,
    /// Check that a VMM can use a device: the service opens it through VFIO the way QEMU does
    /// and reports each step. Exits 0 when every step passed, 1 when one failed.
    Probe {
        /// mdev UUID, or PCI address of a VF or pass-through device.
        target: String,
    },
    /// Create an instance of PROFILE for DOMAIN and attach it with `virsh attach-device`:
    /// transient when it goes only into the running domain, persistent (defined) when the
    /// domain's configuration names it; claimed by the domain either way.
    Attach {
        /// libvirt domain name.
        domain: String,
        /// Profile to create the instance from.
        profile: String,
        /// Attach to the running domain.
        #[arg(long)]
        live: bool,
        /// Attach to the domain's persistent configuration.
        #[arg(long)]
        config: bool,
    },
    /// Detach an instance from DOMAIN with `virsh detach-device`, then destroy it unless the
    /// running domain or its configuration still names it.
    Detach {
        /// libvirt domain name.
        domain: String,
        /// UUID (or PCI address) of the instance.
        uuid: String,
        /// Detach from the running domain.
        #[arg(long)]
        live: bool,
        /// Detach from the domain's persistent configuration.
        #[arg(long)]
        config: bool,
    },
    /// Install the libvirt qemu hook (runs `mdev-manager-hook --install [ROOT]`, found next to
    /// vgpuctl or on PATH). Needs no service.
    InstallHook {
        /// Install under this root instead of `/` (a chroot or image being built).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Write shell completions or man pages (used by packaging).
    #[command(hide = true)]
    Generate {
        /// What to write.
        what: GenerateWhat,
        /// Directory to write into.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

/// `vgpuctl job` subcommands.
#[derive(Debug, Subcommand)]
pub enum JobAction {
    /// Ask a job to stop; what it did is undone and it ends as "cancelled" (exit status 12
    /// for whoever waits for it). Its starter may; anyone else needs the operation's polkit
    /// action.
    Cancel {
        /// Job number or path (`3` or `/org/mdevmanager/VGpu1/jobs/3`).
        job: String,
    },
}

/// `vgpuctl schedule` subcommands.
#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// Show weights, shares and policies as a table (or JSON), or one period as a picture.
    Show {
        /// Only this parent.
        parent: Option<String>,
        /// Draw one period of the parent's plan as an SVG timeline into FILE.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
}

/// On or off.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnOff {
    /// Enable.
    On,
    /// Disable.
    Off,
}

impl OnOff {
    /// Whether it is `on`.
    pub fn enabled(self) -> bool {
        matches!(self, OnOff::On)
    }
}

/// Generated files.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GenerateWhat {
    /// bash, zsh and fish completions.
    Completions,
    /// Man pages (vgpuctl.1 and one per subcommand).
    Man,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// The command line is well-formed (clap's own checks: conflicting names, `requires` on
    /// arguments that exist, ...), so the man pages and completions generated from it are too.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `destroy --no-wait` parses, with several UUIDs.
    #[test]
    fn destroy_takes_no_wait() {
        let cli = Cli::try_parse_from(["vgpuctl", "destroy", "--no-wait", "a", "b"]).unwrap();
        match cli.command {
            super::Command::Destroy {
                uuids,
                no_wait,
                force,
            } => {
                assert_eq!(uuids, ["a", "b"]);
                assert!(no_wait);
                assert!(!force);
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
