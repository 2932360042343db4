//! Claims: which domain holds which instances. A claim is all or nothing; release is
//! idempotent; verify reports drift and never fails.
//!
//! A claim of a known instance holds that instance's lock (see `instance_locks`) from reading
//! its record to writing the claim, as a destroy does from its claim check to forgetting the
//! record: two domains never both see an instance unclaimed, and a claim never starts a device
//! whose record a destroy is removing. A request is checked whole (kinds, UUIDs, weights, no
//! device named twice) before anything is changed.

use super::{
    check_scheduling, claimed, lock, Claim, CreateRequest, CreateTarget, DestroyOptions,
    DeviceRequest, DomainRef, Engine, EngineError, EngineEvent, InstanceInfo, InstanceKind,
    OperationContext, ReleaseReport, Scheduling,
};
use crate::state::{InstanceRecord, ProfileName, Uuid};
use mdev_host::discovery::{self, names, names::PciAddress};

/// One thing a claim did, undone in reverse if a later device fails.
enum ClaimStep {
    /// An instance created for the claim.
    Created(Box<InstanceRecord>),
    /// A defined instance started for the claim.
    Started(String),
    /// A claim set on an existing instance (its previous claim, always `None` today).
    Claimed(String),
}

impl Engine {
    /// Claims every device a domain asks for, all or nothing, with the default context (see
    /// [`Engine::claim_domain_with`]).
    pub fn claim_domain(
        &self,
        domain: &DomainRef,
        devices: &[DeviceRequest],
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        self.claim_domain_with(&OperationContext::default(), domain, devices)
    }

    /// [`Engine::claim_domain`] with `ctx`: cancelling its token stops the claim before the
    /// next device (and once more after the last), undoing everything it did.
    pub fn claim_domain_with(
        &self,
        ctx: &OperationContext,
        domain: &DomainRef,
        devices: &[DeviceRequest],
    ) -> Result<Vec<InstanceInfo>, EngineError> {
        let domain_uuid = names::parse_uuid(&domain.uuid)?;
        check_domain_name(&domain.name)?;
        check_devices(devices)?;
        let mut steps: Vec<ClaimStep> = Vec::new();
        let mut claimed_uuids: Vec<String> = Vec::new();
        for (index, device) in devices.iter().enumerate() {
            let claimed = ctx
                .check(|| format!("claiming {}", describe_device(device)))
                .and_then(|()| {
                    self.claim_one(ctx, domain, domain_uuid, device, &claimed_uuids, &mut steps)
                });
            match claimed {
                Ok(uuid) => claimed_uuids.push(uuid),
                Err(error) => {
                    let rollback_failures = self.undo_claim(steps);
                    return Err(EngineError::Batch {
                        step: format!(
                            "device {} of {} ({})",
                            index + 1,
                            devices.len(),
                            describe_device(device)
                        ),
                        source: Box::new(error),
                        rollback_failures,
                    });
                }
            }
        }
        // A cancel that came during the last device still undoes the whole claim.
        if let Err(error) = ctx.check(|| format!("finishing the claim of domain {}", domain.name)) {
            let rollback_failures = self.undo_claim(steps);
            return Err(EngineError::Batch {
                step: format!(
                    "claiming {} device(s) for domain {}",
                    devices.len(),
                    domain.name
                ),
                source: Box::new(error),
                rollback_failures,
            });
        }
        let mut infos = Vec::with_capacity(claimed_uuids.len());
        for uuid in &claimed_uuids {
            match self.record(uuid) {
                Ok(record) => infos.push(self.info_of(&record)),
                // Only a forced destroy can take a claimed instance meanwhile; the claim is
                // then not what the caller asked for, and what it did is undone.
                Err(error) => {
                    let rollback_failures = self.undo_claim(steps);
                    return Err(EngineError::Batch {
                        step: format!("reading back {uuid} for domain {}", domain.name),
                        source: Box::new(error),
                        rollback_failures,
                    });
                }
            }
        }
        Ok(infos)
    }

    fn claim_one(
        &self,
        ctx: &OperationContext,
        domain: &DomainRef,
        domain_uuid: Uuid,
        device: &DeviceRequest,
        already: &[String],
        steps: &mut Vec<ClaimStep>,
    ) -> Result<String, EngineError> {
        let kind = device.kind.as_str();
        if !matches!(kind, "" | "mdev" | "vf" | "passthrough") {
            return Err(EngineError::InvalidArgument {
                what: "device kind",
                value: device.kind.clone(),
                reason: "expected mdev, vf or passthrough".into(),
            });
        }
        let uuid = device
            .uuid
            .as_deref()
            .map(names::parse_uuid)
            .transpose()?
            .map(|u| u.to_string());
        // A pass-through named by address is the instance already holding that GPU, if any.
        let uuid = uuid.or_else(|| match (kind, &device.pci_address) {
            ("passthrough", Some(address)) => self.passthrough_instance_at(address),
            _ => None,
        });
        let new_claim = |transient: bool, started_by_claim: bool| Claim {
            domain_name: domain.name.clone(),
            domain_uuid,
            transient,
            started_by_claim,
        };
        // Held until this device is claimed (or created for the claim): the record read below
        // stays what it is until the claim is written.
        let _held = uuid.as_deref().map(|uuid| self.instance_locks.hold(uuid));
        // A known instance: claim it (starting it if it is only defined).
        if let Some(uuid) = &uuid {
            let existing = lock(&self.state).instance(uuid).cloned();
            if let Some(record) = existing {
                if let Some(claim) = &record.claim {
                    if claim.domain_uuid == domain_uuid {
                        // prepare called again: already ours
                        return Ok(record.uuid.to_string());
                    }
                    return Err(claimed(&record.uuid.to_string(), claim));
                }
                let started = !self.is_active(&record);
                if started {
                    self.start_record(ctx, &record)?;
                    steps.push(ClaimStep::Started(record.uuid.to_string()));
                }
                let weight = device.weight;
                self.update_state(|state| {
                    if let Some(r) = state.instance_mut(&record.uuid) {
                        r.claim = Some(new_claim(false, started));
                        if weight.is_some() {
                            r.scheduling.weight = weight;
                        }
                    }
                })?;
                steps.push(ClaimStep::Claimed(record.uuid.to_string()));
                self.emit(EngineEvent::InstanceChanged {
                    uuid: record.uuid.to_string(),
                });
                return Ok(record.uuid.to_string());
            }
        }
        // A profile-only request that this domain already holds an instance of (prepare sent
        // twice) reuses it instead of taking a second one.
        if let (None, Some(profile)) = (&uuid, &device.profile) {
            let reused = lock(&self.state)
                .instances
                .values()
                .find(|r| {
                    r.profile.as_ref().is_some_and(|p| p.as_str() == profile)
                        && r.claim
                            .as_ref()
                            .is_some_and(|c| c.domain_uuid == domain_uuid)
                        && !already.contains(&r.uuid.to_string())
                })
                .map(|r| r.uuid.to_string());
            if let Some(reused) = reused {
                return Ok(reused);
            }
        }
        let target = match (kind, &device.profile, &device.pci_address) {
            (_, Some(profile), _) => CreateTarget::Profile {
                profile: profile.clone(),
                parent: device.parent.clone(),
            },
            ("passthrough", None, Some(address)) => CreateTarget::Passthrough {
                gpu: address.clone(),
                force: device.force,
            },
            ("vf", None, Some(address)) => {
                let vf: PciAddress = address.parse()?;
                let pf = discovery::physfn_of(self.fs(), vf).ok_or_else(|| {
                    EngineError::InvalidArgument {
                        what: "VF address",
                        value: vf.to_string(),
                        reason: "not an SR-IOV VF on this host (no physfn link)".into(),
                    }
                })?;
                CreateTarget::Vf {
                    pf: pf.to_string(),
                    vf: Some(vf.to_string()),
                }
            }
            _ => {
                return Err(match uuid {
                    Some(uuid) => EngineError::UnknownInstance { uuid },
                    None => EngineError::InvalidArgument {
                        what: "device",
                        value: describe_device(device),
                        reason: "names neither a known instance UUID, a profile, nor a VF address"
                            .into(),
                    },
                })
            }
        };
        let request = CreateRequest {
            target,
            uuid,
            persistent: false,
            autostart: false,
            attributes: Vec::new(),
            scheduling: Scheduling {
                weight: device.weight,
                ..Scheduling::default()
            },
            placement: device.placement,
            force: device.force,
        };
        let record = self.create_one(ctx, &request, Some(new_claim(true, false)))?;
        steps.push(ClaimStep::Created(Box::new(record.clone())));
        Ok(record.uuid.to_string())
    }

    fn undo_claim(&self, steps: Vec<ClaimStep>) -> Vec<String> {
        let mut failures = Vec::new();
        for step in steps.into_iter().rev() {
            let result = match &step {
                ClaimStep::Created(record) => self
                    .roll_back(std::slice::from_ref(record))
                    .into_iter()
                    .next()
                    .map(Err),
                ClaimStep::Claimed(uuid) => Some(
                    self.update_state(|state| {
                        if let Some(record) = state.instance_mut(uuid) {
                            record.claim = None;
                        }
                    })
                    .map_err(|e| format!("dropping the claim on {uuid}: {e}")),
                ),
                ClaimStep::Started(uuid) => Some(
                    self.stop_or_forget(uuid, DestroyOptions { force: true })
                        .map_err(|e| format!("stopping {uuid} again: {e}")),
                ),
            };
            if let Some(Err(failure)) = result {
                failures.push(failure);
            }
        }
        failures
    }

    /// Releases a domain's claims: destroys its transient instances, drops the claim on
    /// persistent ones (stopping those the claim started unless they are autostart).
    /// Idempotent: releasing a domain that holds nothing does nothing.
    pub fn release_domain(&self, domain: &DomainRef) -> Result<ReleaseReport, EngineError> {
        let domain_uuid = names::parse_uuid(&domain.uuid)?;
        let held: Vec<InstanceRecord> = lock(&self.state)
            .instances
            .values()
            .filter(|r| {
                r.claim
                    .as_ref()
                    .is_some_and(|c| c.domain_uuid == domain_uuid)
            })
            .cloned()
            .collect();
        let mut report = ReleaseReport::default();
        // The transient ones go in one batch (one state save); if the batch stops part-way,
        // the rest are tried one by one so each problem is reported against its instance.
        let transient: Vec<String> = held
            .iter()
            .filter(|r| r.claim.as_ref().is_some_and(|c| c.transient))
            .map(|r| r.uuid.to_string())
            .collect();
        let batch = if transient.is_empty() {
            Ok(())
        } else {
            self.destroy_batch(&transient, DestroyOptions { force: true })
        };
        for record in held {
            let Some(claim) = record.claim.clone() else {
                continue;
            };
            if claim.transient {
                // Done by the batch, or by the part of it that ran before it stopped.
                let gone = batch.is_ok() || !lock(&self.state).has_instance(&record.uuid);
                let outcome = if gone {
                    Ok(())
                } else {
                    self.destroy(&record.uuid.to_string(), DestroyOptions { force: true })
                };
                match outcome {
                    Ok(()) => report.destroyed.push(record.uuid.to_string()),
                    Err(error) => report.problems.push(format!(
                        "destroying {} {}: {error}",
                        record.kind, record.uuid
                    )),
                }
                continue;
            }
            if claim.started_by_claim && !record.autostart {
                if let Err(error) =
                    self.stop_or_forget(&record.uuid.to_string(), DestroyOptions { force: true })
                {
                    report
                        .problems
                        .push(format!("stopping {} {}: {error}", record.kind, record.uuid));
                }
            }
            // Only this domain's claim is dropped: the claim may have been released and taken
            // by another domain since `held` was read.
            match self.update_state(|state| {
                if let Some(r) = state.instance_mut(&record.uuid) {
                    if r.claim
                        .as_ref()
                        .is_some_and(|c| c.domain_uuid == domain_uuid)
                    {
                        r.claim = None;
                    }
                }
            }) {
                Ok(()) => {
                    report.unclaimed.push(record.uuid.to_string());
                    self.emit(EngineEvent::InstanceChanged {
                        uuid: record.uuid.to_string(),
                    });
                }
                Err(error) => report
                    .problems
                    .push(format!("dropping the claim on {}: {error}", record.uuid)),
            }
        }
        Ok(report)
    }

    /// Compares what a running domain should hold with what exists; never fails for drift.
    pub fn verify_domain(&self, domain: &DomainRef, devices: &[DeviceRequest]) -> Vec<String> {
        let domain_uuid = match names::parse_uuid(&domain.uuid) {
            Ok(uuid) => uuid,
            Err(error) => return vec![error.to_string()],
        };
        let records: Vec<InstanceRecord> = lock(&self.state).instances.values().cloned().collect();
        let held: Vec<&InstanceRecord> = records
            .iter()
            .filter(|r| {
                r.claim
                    .as_ref()
                    .is_some_and(|c| c.domain_uuid == domain_uuid)
            })
            .collect();
        let mut drift = Vec::new();
        let mut accounted: Vec<Uuid> = Vec::new();
        for device in devices {
            let found = match (&device.uuid, &device.pci_address) {
                (Some(uuid), _) => match names::parse_uuid(uuid) {
                    Ok(uuid) => records.iter().find(|r| r.uuid == uuid),
                    Err(error) => {
                        drift.push(error.to_string());
                        continue;
                    }
                },
                (None, Some(address)) => match address.parse::<PciAddress>() {
                    Ok(vf) => records.iter().find(|r| r.vf == Some(vf)),
                    Err(error) => {
                        drift.push(error.to_string());
                        continue;
                    }
                },
                (None, None) => {
                    // A profile-only request: any held instance of that profile satisfies it.
                    let by_profile = held
                        .iter()
                        .find(|r| {
                            r.profile.as_ref().map(ProfileName::as_str) == device.profile.as_deref()
                                && !accounted.contains(&r.uuid)
                        })
                        .copied();
                    if by_profile.is_none() {
                        drift.push(format!(
                            "no instance of profile {:?} is held by domain {}",
                            device.profile, domain.name
                        ));
                    }
                    by_profile
                }
            };
            let Some(record) = found else {
                if device.uuid.is_some() || device.pci_address.is_some() {
                    drift.push(format!(
                        "{} is not known to mdev-manager",
                        describe_device(device)
                    ));
                }
                continue;
            };
            accounted.push(record.uuid);
            match &record.claim {
                Some(claim) if claim.domain_uuid == domain_uuid => {}
                Some(claim) => drift.push(format!(
                    "{} {} is claimed by domain {} ({}), not {}",
                    record.kind, record.uuid, claim.domain_name, claim.domain_uuid, domain.name
                )),
                None => drift.push(format!(
                    "{} {} is not claimed by domain {}",
                    record.kind, record.uuid, domain.name
                )),
            }
            if !self.is_active(record) {
                drift.push(format!(
                    "{} {} does not exist on the host",
                    record.kind, record.uuid
                ));
            }
            if record.kind == InstanceKind::Mdev && device.kind == "vf" {
                drift.push(format!(
                    "{} is an mdev, the domain asks for a VF",
                    record.uuid
                ));
            }
        }
        for record in held {
            if !accounted.contains(&record.uuid) {
                drift.push(format!(
                    "{} {} is claimed by domain {} but the domain does not use it",
                    record.kind, record.uuid, domain.name
                ));
            }
        }
        drift
    }
}

/// Checks a whole request before anything is changed: every weight is valid, no UUID and no
/// PCI address is named by two entries (one instance cannot be two of a domain's devices).
fn check_devices(devices: &[DeviceRequest]) -> Result<(), EngineError> {
    let mut uuids: Vec<(String, usize)> = Vec::new();
    let mut addresses: Vec<(String, usize)> = Vec::new();
    for (index, device) in devices.iter().enumerate() {
        check_scheduling(&Scheduling {
            weight: device.weight,
            ..Scheduling::default()
        })?;
        if let Some(text) = &device.uuid {
            let uuid = names::parse_uuid(text)?.to_string();
            if let Some((_, first)) = uuids.iter().find(|(seen, _)| *seen == uuid) {
                return Err(named_twice("device UUID", uuid, *first, index));
            }
            uuids.push((uuid, index));
        }
        if let Some(text) = &device.pci_address {
            let address = text
                .parse::<PciAddress>()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| text.clone());
            if let Some((_, first)) = addresses.iter().find(|(seen, _)| *seen == address) {
                return Err(named_twice("device PCI address", address, *first, index));
            }
            addresses.push((address, index));
        }
    }
    Ok(())
}

fn named_twice(what: &'static str, value: String, first: usize, second: usize) -> EngineError {
    EngineError::InvalidArgument {
        what,
        value,
        reason: format!(
            "named by device entries {} and {} of one request; each device is claimed once",
            first + 1,
            second + 1
        ),
    }
}

fn check_domain_name(name: &str) -> Result<(), EngineError> {
    if name.is_empty() || name.len() > 255 || name.chars().any(|c| c.is_control()) {
        return Err(EngineError::InvalidArgument {
            what: "domain name",
            value: name.to_owned(),
            reason: "must be 1..=255 characters without control characters".into(),
        });
    }
    Ok(())
}

fn describe_device(device: &DeviceRequest) -> String {
    let mut parts = vec![if device.kind.is_empty() {
        "mdev".to_owned()
    } else {
        device.kind.clone()
    }];
    if let Some(uuid) = &device.uuid {
        parts.push(format!("uuid {uuid}"));
    }
    if let Some(profile) = &device.profile {
        parts.push(format!("profile {profile}"));
    }
    if let Some(parent) = &device.parent {
        parts.push(format!("parent {parent}"));
    }
    if let Some(address) = &device.pci_address {
        parts.push(format!("PCI {address}"));
    }
    parts.join(" ")
}
