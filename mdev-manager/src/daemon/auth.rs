//! Who may call the mutating methods: polkit decides, root is let through, and without polkitd
//! only root may change anything. Reads need no authorization.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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
    /// The uid of the bus connection `sender` when this authorizer knows it (or can learn it
    /// cheaply); `None` sends the caller to the bus.
    fn caller_uid<'a>(&'a self, _sender: &'a str) -> BoxFuture<'a, Option<u32>> {
        Box::pin(async { None })
    }
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

/// How many callers' uids [`UidCache`] keeps at most. Entries leave when their bus name does;
/// the bound only covers the one that can stay behind: a lookup answered just before its name
/// left, stored after the departure was handled (a unique name is never reused, so such an
/// entry is never wrong, only useless).
const UID_CACHE_BOUND: usize = 4096;

/// The uid of each caller seen, by unique bus name: a caller's uid cannot change while its
/// connection lives, and a unique name is never given to another connection, so the bus is
/// asked once per connection instead of once per call. An entry is dropped when its name
/// leaves the bus (`NameOwnerChanged` with no new owner).
#[derive(Debug, Default)]
pub struct UidCache {
    uids: std::sync::Mutex<HashMap<String, u32>>,
}

impl UidCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.uids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The uid stored for `sender`.
    pub fn get(&self, sender: &str) -> Option<u32> {
        self.lock().get(sender).copied()
    }

    /// Stores `uid` for the unique name `sender` (a well-known name can change owner: never
    /// stored).
    pub fn insert(&self, sender: &str, uid: u32) {
        if !sender.starts_with(':') {
            return;
        }
        let mut uids = self.lock();
        if uids.len() >= UID_CACHE_BOUND && !uids.contains_key(sender) {
            uids.clear();
        }
        uids.insert(sender.to_owned(), uid);
    }

    /// Forgets `name` (it left the bus).
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// How many callers are known.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no caller is known.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// polkit on the system bus the service is connected to.
#[derive(Debug, Clone)]
pub struct Polkit {
    connection: zbus::Connection,
    uids: Arc<UidCache>,
    /// Set once the task that empties `uids` of departed names is following the bus.
    watching: Arc<tokio::sync::OnceCell<()>>,
}

enum Answer {
    Root,
    Polkit(zbus_polkit::policykit1::AuthorizationResult),
    NoPolkitd,
}

impl Polkit {
    /// Asks the polkitd on `connection`'s bus.
    pub fn new(connection: zbus::Connection) -> Self {
        Self {
            connection,
            uids: Arc::new(UidCache::default()),
            watching: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// The callers whose uid is known (for tests and diagnostics).
    pub fn uid_cache(&self) -> &UidCache {
        &self.uids
    }

    /// The uid of the connection `sender`: from the cache, else asked of the bus once and kept
    /// until the name leaves.
    pub async fn caller_uid(&self, sender: &str) -> Result<u32, BusError> {
        if let Some(uid) = self.uids.get(sender) {
            return Ok(uid);
        }
        // Departures are followed before the first answer is stored, so no entry outlives
        // its name unnoticed (but for the race the bound covers).
        self.watching
            .get_or_try_init(|| self.watch_departures())
            .await?;
        let dbus = zbus::fdo::DBusProxy::new(&self.connection)
            .await
            .map_err(|e| BusError::Failed(format!("cannot reach the bus daemon: {e}")))?;
        let name = BusName::try_from(sender)
            .map_err(|e| BusError::Failed(format!("bad sender name {sender}: {e}")))?;
        let uid = dbus
            .get_connection_unix_user(name)
            .await
            .map_err(|e| BusError::Failed(format!("cannot learn the uid of {sender}: {e}")))?;
        self.uids.insert(sender, uid);
        Ok(uid)
    }

    /// Subscribes to `NameOwnerChanged` and starts the task that drops the cache entry of
    /// every unique name that leaves. The task ends with the connection or the cache.
    async fn watch_departures(&self) -> Result<(), BusError> {
        let dbus = zbus::fdo::DBusProxy::new(&self.connection)
            .await
            .map_err(|e| BusError::Failed(format!("cannot reach the bus daemon: {e}")))?;
        let mut departures = dbus.receive_name_owner_changed().await.map_err(|e| {
            BusError::Failed(format!("cannot follow the callers leaving the bus: {e}"))
        })?;
        let uids = Arc::downgrade(&self.uids);
        tokio::spawn(async move {
            use futures_util::StreamExt;
            while let Some(signal) = departures.next().await {
                let Ok(args) = signal.args() else {
                    continue;
                };
                if args.new_owner().is_some() {
                    continue;
                }
                let Some(uids) = uids.upgrade() else {
                    return;
                };
                uids.forget(args.name().as_str());
            }
        });
        Ok(())
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

    fn caller_uid<'a>(&'a self, sender: &'a str) -> BoxFuture<'a, Option<u32>> {
        Box::pin(async move { Polkit::caller_uid(self, sender).await.ok() })
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
