//! The simulated host's vendor tools, answering the host-command seam
//! ([`mdev_host::command`]) as the real tools behave.
//!
//! Modelled: NVIDIA's `/usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f|ALL>` (installed when
//! the topology lists it in `host_tools`), as NVIDIA's vGPU guide and the shipped script
//! behave (`docs/simulated-host.md` lists the facts):
//! * the GPU is looked up among NVIDIA functions (vendor `0x10de`); an unknown address exits 1
//!   without output; a function that is not a display controller (class `0x03`) exits 1 with
//!   "This is not a VGA or 3D controller. Exiting."; one without `sriov_numvfs` exits 0
//!   without doing anything (the script's "no SR-IOV: nothing to do");
//! * `-e` with VFs already enabled prints "GPU at <bdf> already has VFs enabled." and exits 0;
//!   otherwise "Enabling VFs on <bdf>", enables **all** `sriov_totalvfs` VFs, and binds every
//!   VF that is not on `nvidia` to it;
//! * `-d` with none enabled prints "GPU at <bdf> already has VFs disabled."; otherwise
//!   "Disabling VFs on <bdf>", unbinds the VFs from `vfio-pci`/`nvidia`, and sets 0 VFs;
//! * `ALL` runs the operation on every NVIDIA display function 0, stopping at a failure;
//! * a sysfs write the kernel refuses prints `write error: <strerror>` on stderr and exits 1;
//! * anything else prints the usage on stderr and exits 1.
//!
//! And `/usr/bin/nvidia-smi vgpu -q` (installed when listed in `host_tools`): the host's
//! NVIDIA vGPUs in the real tool's layout (`sim::world::nvidia_smi` says what it prints);
//! other arguments print "Invalid combination of input arguments" and exit 2.
//!
//! The real script passes the PF through `pci-pf-stub` while it writes `sriov_numvfs`; the
//! simulated `nvidia` driver configures SR-IOV itself, so the model writes with `nvidia`
//! bound. The end state (PF on `nvidia`, all VFs on `nvidia`) is the script's.

use std::io;
use std::path::Path;

use super::SimHost;
use mdev_host::command::{CommandError, CommandOutput, HostCommands, RunLimits};
use mdev_host::HostFs;

/// Where NVIDIA's vGPU manager installs its SR-IOV tool.
pub const SRIOV_MANAGE: &str = "/usr/lib/nvidia/sriov-manage";

/// Where NVIDIA's driver packages install `nvidia-smi`.
pub const NVIDIA_SMI: &str = "/usr/bin/nvidia-smi";

const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const NVIDIA_VENDOR: &str = "0x10de";

const USAGE: &str = "Usage:\n    /usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f|ALL>\n        \
Enable/disable Virtual functions on the GPU specified by the PCI_ID=ssss:bb:dd.f.\n        \
If 'ALL' is specified in place of PCI_ID, operate on all the nvidia GPUs in the system.\n\n    \
/usr/lib/nvidia/sriov-manage -h\n        Print this help.\n";

/// What one run printed and its exit status, built up as the model runs.
#[derive(Default)]
struct Run {
    stdout: String,
    stderr: String,
}

impl Run {
    fn finish(self, status: i32) -> CommandOutput {
        CommandOutput {
            status,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

impl HostCommands for SimHost {
    fn installed(&self, program: &Path) -> bool {
        let tools = self.lock().topology.host_tools.clone();
        tools.iter().any(|tool| Path::new(tool) == program)
    }

    fn run(
        &self,
        program: &Path,
        args: &[String],
        limits: &RunLimits<'_>,
    ) -> Result<CommandOutput, CommandError> {
        if !self.installed(program) {
            return Err(CommandError::NotInstalled {
                program: program.to_owned(),
            });
        }
        if (limits.cancelled)() {
            return Err(CommandError::Cancelled {
                command: mdev_host::command::command_line(program, args),
                output: Run::default().finish(-1),
            });
        }
        // Only these are modelled; a tool listed without a model behaves as absent.
        if program == Path::new(NVIDIA_SMI) {
            return Ok(self.nvidia_smi(args));
        }
        if program != Path::new(SRIOV_MANAGE) {
            return Err(CommandError::NotInstalled {
                program: program.to_owned(),
            });
        }
        Ok(self.sriov_manage(args))
    }
}

impl SimHost {
    /// `nvidia-smi vgpu -q` (the only query modelled); anything else is refused as the real
    /// tool refuses arguments it does not know.
    fn nvidia_smi(&self, args: &[String]) -> CommandOutput {
        let mut run = Run::default();
        if args != ["vgpu", "-q"] {
            run.stdout.push_str(
                "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n",
            );
            return run.finish(2);
        }
        run.stdout.push_str(&self.lock().nvidia_smi_vgpu_query());
        run.finish(0)
    }

    fn sriov_manage(&self, args: &[String]) -> CommandOutput {
        let mut run = Run::default();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let enable = match args.as_slice() {
            ["-h"] => {
                run.stderr.push_str(USAGE);
                return run.finish(0);
            }
            ["-e", _] => true,
            ["-d", _] => false,
            _ => {
                run.stderr.push_str(USAGE);
                return run.finish(1);
            }
        };
        let target = args[1];
        let gpus = if target.eq_ignore_ascii_case("all") {
            self.nvidia_gpus()
        } else {
            match self.nvidia_function(target) {
                Some(gpu) => vec![gpu],
                None => return run.finish(1),
            }
        };
        for gpu in gpus {
            let status = self.sriov_manage_one(&gpu, enable, &mut run);
            if status != 0 {
                return run.finish(status);
            }
        }
        run.finish(0)
    }

    /// `lspci -D -d 10de: -s <target>`: the NVIDIA function at that address (with or without
    /// its domain), if any.
    fn nvidia_function(&self, target: &str) -> Option<String> {
        let full = if target.matches(':').count() == 1 {
            format!("0000:{target}")
        } else {
            target.to_owned()
        };
        let address: mdev_host::discovery::names::PciAddress = full.parse().ok()?;
        let bdf = address.to_string();
        let vendor = self
            .read(&Path::new(PCI_DEVICES).join(&bdf).join("vendor"))
            .ok()?;
        (vendor.trim() == NVIDIA_VENDOR).then_some(bdf)
    }

    /// NVIDIA display controllers at function 0 (what `ALL` covers), by address.
    fn nvidia_gpus(&self) -> Vec<String> {
        let mut gpus: Vec<String> = self
            .list(Path::new(PCI_DEVICES))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|name| name.into_string().ok())
            .filter(|bdf| bdf.ends_with(".0"))
            .filter(|bdf| self.nvidia_function(bdf).is_some())
            .filter(|bdf| {
                self.read(&Path::new(PCI_DEVICES).join(bdf).join("class"))
                    .is_ok_and(|class| {
                        let class = class.trim();
                        class.starts_with("0x0300") || class.starts_with("0x0302")
                    })
            })
            .collect();
        gpus.sort();
        gpus
    }

    fn sriov_manage_one(&self, gpu: &str, enable: bool, run: &mut Run) -> i32 {
        let dir = Path::new(PCI_DEVICES).join(gpu);
        let numvfs_path = dir.join("sriov_numvfs");
        if !self.exists(&numvfs_path) {
            return 0;
        }
        let is_display = self
            .read(&dir.join("class"))
            .is_ok_and(|class| class.trim().starts_with("0x03"));
        if !is_display {
            run.stderr
                .push_str("This is not a VGA or 3D controller. Exiting.\n");
            return 1;
        }
        let current: u32 = self
            .read(&numvfs_path)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0);
        let vfs = |host: &SimHost| -> Vec<String> {
            let mut vfs: Vec<(u32, String)> = host
                .list(&dir)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|name| {
                    let name = name.into_string().ok()?;
                    let index = name.strip_prefix("virtfn")?.parse().ok()?;
                    let target = host.read_link(&dir.join(&name)).ok()?;
                    Some((index, target.file_name()?.to_string_lossy().into_owned()))
                })
                .collect();
            vfs.sort();
            vfs.into_iter().map(|(_, vf)| vf).collect()
        };
        let write = |run: &mut Run, path: &Path, value: &str| -> bool {
            match self.write(path, value.as_bytes()) {
                Ok(()) => true,
                Err(error) => {
                    run.stderr.push_str(&format!(
                        "{}: line 1: echo: write error: {}\n",
                        SRIOV_MANAGE,
                        strerror(&error)
                    ));
                    false
                }
            }
        };
        if enable {
            if current != 0 {
                run.stdout
                    .push_str(&format!("GPU at {gpu} already has VFs enabled.\n"));
                return 0;
            }
            run.stdout.push_str(&format!("Enabling VFs on {gpu}\n"));
            let total = self
                .read(&dir.join("sriov_totalvfs"))
                .map(|text| text.trim().to_owned())
                .unwrap_or_default();
            if !write(run, &numvfs_path, &total) {
                return 1;
            }
            for vf in vfs(self) {
                let vf_dir = Path::new(PCI_DEVICES).join(&vf);
                let driver = self
                    .read_link(&vf_dir.join("driver"))
                    .ok()
                    .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
                if driver.as_deref() == Some("nvidia") {
                    continue;
                }
                if let Some(driver) = driver {
                    let unbind = Path::new("/sys/bus/pci/drivers")
                        .join(driver)
                        .join("unbind");
                    if !write(run, &unbind, &vf) {
                        return 1;
                    }
                }
                if !write(run, Path::new("/sys/bus/pci/drivers/nvidia/bind"), &vf) {
                    return 1;
                }
            }
        } else {
            if current == 0 {
                run.stdout
                    .push_str(&format!("GPU at {gpu} already has VFs disabled.\n"));
                return 0;
            }
            run.stdout.push_str(&format!("Disabling VFs on {gpu}\n"));
            for vf in vfs(self) {
                for driver in ["vfio-pci", "nvidia"] {
                    let drivers = Path::new("/sys/bus/pci/drivers").join(driver);
                    if self.exists(&drivers.join(&vf)) && !write(run, &drivers.join("unbind"), &vf)
                    {
                        return 1;
                    }
                }
            }
            if !write(run, &numvfs_path, "0") {
                return 1;
            }
        }
        0
    }
}

/// The C library's text for an errno, as a shell prints it.
fn strerror(error: &io::Error) -> String {
    let text = error.to_string();
    // `io::Error`'s Display is "<strerror> (os error N)".
    match text.find(" (os error") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}
