//! The mdev-manager D-Bus API: names, wire types, typed errors and client proxies.
#![deny(missing_docs)]
