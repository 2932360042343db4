//! `vfio-probe TARGET [--json]`: checks that a VMM will be able to use an mdev or a PCI
//! function through VFIO. Exit status 0 when usable, 1 when a step failed, 2 on bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use vfio_probe::{probe, KvmUse, ProbeOptions, Target};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KvmArg {
    /// Use /dev/kvm when it works, otherwise skip the kvm steps.
    Auto,
    /// Never use KVM.
    Never,
    /// Fail when KVM does not work.
    Required,
}

#[derive(Debug, Parser)]
#[command(
    name = "vfio-probe",
    version,
    about = "VFIO preflight probe for an mdev or a VF"
)]
struct Args {
    /// An mdev UUID or a PCI address (DDDD:BB:DD.F) bound to vfio-pci.
    target: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Root under which /sys paths are resolved.
    #[arg(long, default_value = "/")]
    sysfs_root: PathBuf,
    /// Whether to attach the group to a KVM VM through the kvm-vfio device.
    #[arg(long, value_enum, default_value = "auto")]
    kvm: KvmArg,
    /// Bytes of guest memory to map for the DMA check.
    #[arg(long, default_value_t = 1 << 20)]
    dma_map_size: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let target: Target = match args.target.parse() {
        Ok(target) => target,
        Err(err) => {
            eprintln!("vfio-probe: {err}");
            return ExitCode::from(2);
        }
    };
    let options = ProbeOptions {
        sysfs_root: args.sysfs_root,
        dma_map_size: args.dma_map_size,
        kvm: match args.kvm {
            KvmArg::Auto => KvmUse::Auto,
            KvmArg::Never => KvmUse::Never,
            KvmArg::Required => KvmUse::Required,
        },
    };
    let report = probe(&target, &options);
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(err) => {
                eprintln!("vfio-probe: cannot render the report as JSON: {err}");
                return ExitCode::from(1);
            }
        }
    } else {
        print!("{}", report.to_text());
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
