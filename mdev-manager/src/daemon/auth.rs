//! Who may call the mutating methods: polkit decides, root is let through, and without polkitd
//! only root may change anything. Reads need no authorization.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use dbus_api::BusError;
use zbus::message::{Flags, Header};
use zbus::names::BusName;
use zbus_polkit::policykit1::{AuthorityProxy, CheckAuthorizationFlags, Subject};

/// A boxed future, so [`Authorizer`] can be used as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One authorization question: may the sender of `header` do `action`?
#[derive(Debug)]
pub struct AuthRequest {
    /// The polkit action id (`dbus_api::names::action::*`).
    pub action: &'static str,
    /// Details for polkit rules (`parent`, `profile`, `uuid`, `domain`, `verb`) and
    /// `polkit.message`.
    pub details: HashMap<String, String>,
    /// The caller's unique bus name; `None` on a peer-to-peer connection.
    pub sender: Option<String>,
    /// The polkit subject (the caller's bus name, from the message header).
    pub subject: Option<Subject>,
    /// Whether polkit may ask the user: the header flag is set and the caller did not pass
    /// `auth.no_user_interaction`.
    pub interactive: bool,
}

impl AuthRequest {
    /// A request for the sender of `header`. `no_user_interaction` is the caller's option.
    pub fn new(action: &'static str, header: &Header<'_>, no_user_interaction: bool) -> Self {
        let flag = header
            .primary()
            .flags()
            .contains(Flags::ALLOW_INTERACTIVE_AUTH);
        Self {
            action,
            details: HashMap::new(),
            sender: header.sender().map(|s| s.to_string()),
            subject: Subject::new_for_message_header(header).ok(),
            interactive: flag && !no_user_interaction,
        }
    }

    /// Adds a detail polkit rules can test (`action.lookup("parent")`).
    pub fn detail(mut self, key: &str, value: impl Into<String>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }
}

/// What `GetPermissions` reports for one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Allowed now.
    Yes,
    /// Allowed after authenticating.
    Auth,
    /// Refused.
    No,
}

impl Permission {
    /// The wire form: `yes`, `auth`, `no`.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Yes => "yes",
            Permission::Auth => "auth",
            Permission::No => "no",
        }
    }
}

/// Decides authorization questions. The daemon uses [`Polkit`]; tests over peer-to-peer
/// connections (which have no bus and no sender) use [`AllowAll`] or [`DenyAll`].
pub trait Authorizer: Send + Sync + std::fmt::Debug {
    /// `Ok(())` when allowed, `NotAuthorized` naming the action otherwise.
    fn check(&self, request: AuthRequest) -> BoxFuture<'_, Result<(), BusError>>;
    /// What the caller would get for `request`, without asking the user.
    fn permission(&self, request: AuthRequest) -> BoxFuture<'_, Permission>;
}

/// Allows everything (peer-to-peer unit tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn check(&self, _request: AuthRequest) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async { Ok(()) })
    }
    fn permission(&self, _request: AuthRequest) -> BoxFuture<'_, Permission> {
        Box::pin(async { Permission::Yes })
    }
}

/// Refuses everything (peer-to-peer unit tests of the refusal path).
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl Authorizer for DenyAll {
    fn check(&self, request: AuthRequest) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move { Err(not_authorized(&request, "refused by policy")) })
    }
    fn permission(&self, _request: AuthRequest) -> BoxFuture<'_, Permission> {
        Box::pin(async { Permission::No })
    }
}

fn not_authorized(request: &AuthRequest, why: &str) -> BusError {
    let target = ["uuid", "parent", "profile", "domain"]
        .iter()
        .find_map(|key| request.details.get(*key).map(|v| format!(" on {key} {v}")))
        .unwrap_or_default();
    BusError::NotAuthorized(format!(
        "not authorized to {}{target}: {why}",
        request.action
    ))
}

/// polkit on the system bus the service is connected to.
#[derive(Debug, Clone)]
pub struct Polkit {
    connection: zbus::Connection,
}

enum Answer {
    Root,
    Polkit(zbus_polkit::policykit1::AuthorizationResult),
    NoPolkitd,
}

impl Polkit {
    /// Asks the polkitd on `connection`'s bus.
    pub fn new(connection: zbus::Connection) -> Self {
        Self { connection }
    }

    async fn caller_uid(&self, sender: &str) -> Result<u32, BusError> {
        let dbus = zbus::fdo::DBusProxy::new(&self.connection)
            .await
            .map_err(|e| BusError::Failed(format!("cannot reach the bus daemon: {e}")))?;
        let name = BusName::try_from(sender)
            .map_err(|e| BusError::Failed(format!("bad sender name {sender}: {e}")))?;
        dbus.get_connection_unix_user(name)
            .await
            .map_err(|e| BusError::Failed(format!("cannot learn the uid of {sender}: {e}")))
    }

    async fn ask(&self, request: &AuthRequest, interactive: bool) -> Result<Answer, BusError> {
        let Some(sender) = request.sender.as_deref() else {
            return Err(not_authorized(request, "the caller has no bus name"));
        };
        // Root is let through before polkit is asked: the libvirt hook runs as root, must be
        // fast, and must work when polkitd is not running.
        if self.caller_uid(sender).await? == 0 {
            return Ok(Answer::Root);
        }
        let authority = match AuthorityProxy::new(&self.connection).await {
            Ok(authority) => authority,
            Err(e) => {
                return Err(BusError::Failed(format!(
                    "cannot create a polkit proxy: {e}"
                )))
            }
        };
        let Some(subject) = request.subject.as_ref() else {
            return Err(not_authorized(request, "the caller has no bus name"));
        };
        let details: HashMap<&str, &str> = request
            .details
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let flags = if interactive {
            CheckAuthorizationFlags::ALLOW_USER_INTERACTION
        } else {
            CheckAuthorizationFlags::empty()
        };
        match authority
            .check_authorization(subject, request.action, &details, flags, "")
            .await
        {
            Ok(result) => Ok(Answer::Polkit(result)),
            Err(error) if error_name(&error).is_some_and(|name| polkitd_absent(&name)) => {
                Ok(Answer::NoPolkitd)
            }
            Err(e) => Err(BusError::Failed(format!(
                "polkit check of {} failed: {e}",
                request.action
            ))),
        }
    }
}

/// The D-Bus error name of a failed call (zbus turns the bus's own errors into `fdo::Error`).
fn error_name(error: &zbus::Error) -> Option<String> {
    match error {
        zbus::Error::MethodError(name, _, _) => Some(name.to_string()),
        zbus::Error::FDO(fdo) => Some(zbus::DBusError::name(fdo.as_ref()).to_string()),
        _ => None,
    }
}

/// Whether a failed call to polkit means there is no polkitd: the name has no owner and the
/// bus could not start one (no activation file, or activation failed).
fn polkitd_absent(error_name: &str) -> bool {
    matches!(
        error_name,
        "org.freedesktop.DBus.Error.ServiceUnknown" | "org.freedesktop.DBus.Error.NameHasNoOwner"
    ) || error_name.starts_with("org.freedesktop.DBus.Error.Spawn.")
}

impl Authorizer for Polkit {
    fn check(&self, request: AuthRequest) -> BoxFuture<'_, Result<(), BusError>> {
        Box::pin(async move {
            match self.ask(&request, request.interactive).await? {
                Answer::Root => Ok(()),
                Answer::Polkit(result) if result.is_authorized => Ok(()),
                Answer::Polkit(result) if result.is_challenge => Err(not_authorized(
                    &request,
                    "authentication is required and no agent answered",
                )),
                Answer::Polkit(_) => Err(not_authorized(&request, "refused by polkit")),
                Answer::NoPolkitd => Err(not_authorized(
                    &request,
                    "polkitd is not running, so only root may change vGPUs",
                )),
            }
        })
    }

    fn permission(&self, request: AuthRequest) -> BoxFuture<'_, Permission> {
        Box::pin(async move {
            match self.ask(&request, false).await {
                Ok(Answer::Root) => Permission::Yes,
                Ok(Answer::Polkit(result)) if result.is_authorized => Permission::Yes,
                Ok(Answer::Polkit(result)) if result.is_challenge => Permission::Auth,
                _ => Permission::No,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_unstartable_polkitd_counts_as_absent() {
        assert!(polkitd_absent("org.freedesktop.DBus.Error.ServiceUnknown"));
        assert!(polkitd_absent("org.freedesktop.DBus.Error.NameHasNoOwner"));
        // What a bus whose activation helper cannot run answers (seen on Debian without
        // systemd).
        assert!(polkitd_absent(
            "org.freedesktop.DBus.Error.Spawn.PermissionsInvalid"
        ));
        assert!(!polkitd_absent("org.freedesktop.PolicyKit1.Error.Failed"));
        assert!(!polkitd_absent("org.freedesktop.DBus.Error.AccessDenied"));
    }

    #[tokio::test]
    async fn allow_all_and_deny_all() {
        let message = zbus::Message::method_call("/", "Destroy")
            .build(&())
            .unwrap();
        let header = message.header();
        let request = AuthRequest::new("org.mdevmanager.vgpu1.manage-instances", &header, false)
            .detail("uuid", "0b7f4c6e-1a2b-4c3d-8e9f-001122334455");
        let error = DenyAll.check(request).await.unwrap_err();
        assert_eq!(error.kind(), dbus_api::ErrorKind::NotAuthorized);
        assert!(error
            .message()
            .contains("0b7f4c6e-1a2b-4c3d-8e9f-001122334455"));
        assert!(error.message().contains("manage-instances"));
        let request = AuthRequest::new("org.mdevmanager.vgpu1.manage-instances", &header, false);
        assert!(AllowAll.check(request).await.is_ok());
    }
}
