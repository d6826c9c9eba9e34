//! Who may use which export: allow-list rules matched against a client's source address
//! and, under TLS, the names in its certificate.
//!
//! Without rules ([`AccessRules::open`]) every client may use every export, as before
//! access control existed. With rules, an export is served only to clients a rule for it
//! admits; an export no rule names is refused to everyone. Rules only narrow: a read-only
//! rule never makes a read-only export writable.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::handshake::Access;

/// A client as the rules see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The source address; `None` for Unix-socket and stdin clients.
    pub address: Option<IpAddr>,
    /// Whether TLS is on for this connection.
    pub tls: bool,
    /// The names of its verified client certificate: the subject's common names, its DNS
    /// and e-mail alternative names, and the whole subject (`CN=alice, O=example`).
    /// Empty without TLS or without a certificate.
    pub names: Vec<String>,
}

/// An address block: `10.0.0.0/8`, `::1`, `192.0.2.7` (a single address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    base: IpAddr,
    prefix_bits: u8,
}

impl Network {
    /// Whether `addr` is in this block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        match (self.base, addr) {
            (IpAddr::V4(base), IpAddr::V4(a)) => {
                prefix_equal(&base.octets(), &a.octets(), self.prefix_bits)
            }
            (IpAddr::V6(base), IpAddr::V6(a)) => {
                prefix_equal(&base.octets(), &a.octets(), self.prefix_bits)
            }
            _ => false,
        }
    }
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_equal(a: &[u8], b: &[u8], bits: u8) -> bool {
    let whole = usize::from(bits / 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    let rest = bits % 8;
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

/// Text that is not an address or an address/prefix block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// Not an IP address before the `/`.
    #[error("{0:?} is not an address or an address/prefix block")]
    Address(String),
    /// A prefix length past the address's bits.
    #[error("{text:?}: the prefix length must be 0 to {max}")]
    Prefix {
        /// The text given.
        text: String,
        /// The address's bits (32 or 128).
        max: u8,
    },
}

impl FromStr for Network {
    type Err = NetworkError;

    fn from_str(s: &str) -> Result<Network, NetworkError> {
        let (addr, bits) = match s.split_once('/') {
            Some((addr, bits)) => (addr, Some(bits)),
            None => (s, None),
        };
        let base: IpAddr = addr
            .parse()
            .map_err(|_| NetworkError::Address(s.to_string()))?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        let prefix_bits = match bits {
            None => max,
            Some(bits) => bits
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| NetworkError::Prefix {
                    text: s.to_string(),
                    max,
                })?,
        };
        // A block of IPv4-mapped addresses is the IPv4 block it maps, as client addresses
        // are (`contains` unmaps them).
        if let IpAddr::V6(v6) = base
            && let Some(v4) = v6.to_ipv4_mapped()
            && prefix_bits >= 96
        {
            return Ok(Network {
                base: IpAddr::V4(v4),
                prefix_bits: prefix_bits - 96,
            });
        }
        Ok(Network { base, prefix_bits })
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix_bits)
    }
}

/// One allow-list rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessRule {
    /// The exports it applies to; `"*"` is every export.
    pub exports: Vec<String>,
    /// Certificate names it admits (see [`ClientIdentity::names`]); empty: any client,
    /// with or without TLS.
    pub names: Vec<String>,
    /// Source addresses it admits; empty: any (Unix-socket clients included). A rule with
    /// addresses never admits a Unix-socket client.
    pub networks: Vec<Network>,
    /// The clients it admits may only read.
    pub read_only: bool,
}

impl AccessRule {
    fn applies_to(&self, export: &str) -> bool {
        self.exports.iter().any(|e| e == "*" || e == export)
    }

    fn address_admits(&self, client: &ClientIdentity) -> bool {
        self.networks.is_empty()
            || client
                .address
                .is_some_and(|a| self.networks.iter().any(|n| n.contains(a)))
    }

    fn names_admit(&self, client: &ClientIdentity) -> bool {
        self.names.is_empty() || (client.tls && self.names.iter().any(|n| client.names.contains(n)))
    }
}

/// The rules of a server; see the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessRules {
    rules: Option<Vec<AccessRule>>,
}

impl AccessRules {
    /// No rules: every client may use every export.
    pub fn open() -> AccessRules {
        AccessRules { rules: None }
    }

    /// An allow-list: only what `rules` admit is served.
    pub fn allow_list(rules: Vec<AccessRule>) -> AccessRules {
        AccessRules { rules: Some(rules) }
    }

    /// Whether this is an allow-list (rather than open).
    pub fn is_allow_list(&self) -> bool {
        self.rules.is_some()
    }

    /// The rules (none when open).
    pub fn rules(&self) -> &[AccessRule] {
        self.rules.as_deref().unwrap_or_default()
    }

    /// What `client` may do with `export`.
    pub fn decide(&self, export: &str, client: &ClientIdentity) -> Access {
        let Some(rules) = &self.rules else {
            return Access::ReadWrite;
        };
        let mut admitted = false;
        let mut writable = false;
        let mut tls_would_help = false;
        for rule in rules.iter().filter(|r| r.applies_to(export)) {
            if !rule.address_admits(client) {
                continue;
            }
            if rule.names_admit(client) {
                admitted = true;
                writable |= !rule.read_only;
            } else if !client.tls {
                tls_would_help = true;
            }
        }
        match (admitted, writable) {
            (true, true) => Access::ReadWrite,
            (true, false) => Access::ReadOnly,
            (false, _) if tls_would_help => Access::NeedsTls,
            (false, _) => Access::Denied,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(addr: &str, tls: bool, names: &[&str]) -> ClientIdentity {
        ClientIdentity {
            address: Some(addr.parse().unwrap()),
            tls,
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn rule(exports: &[&str], names: &[&str], nets: &[&str], read_only: bool) -> AccessRule {
        AccessRule {
            exports: exports.iter().map(|s| s.to_string()).collect(),
            names: names.iter().map(|s| s.to_string()).collect(),
            networks: nets.iter().map(|s| s.parse().unwrap()).collect(),
            read_only,
        }
    }

    #[test]
    fn networks_parse_and_match() {
        let net: Network = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one: Network = "192.0.2.7".parse().unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let odd: Network = "192.0.2.0/25".parse().unwrap();
        assert!(odd.contains("192.0.2.127".parse().unwrap()));
        assert!(!odd.contains("192.0.2.128".parse().unwrap()));
        let mapped: Network = "::ffff:10.0.0.0/104".parse().unwrap();
        assert!(mapped.contains("10.200.0.1".parse().unwrap()));
        assert!(mapped.contains("::ffff:10.1.2.3".parse().unwrap()));
        let v6: Network = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert!(
            "0.0.0.0/0"
                .parse::<Network>()
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        for bad in ["10.0.0.0/33", "host", "::1/129", "10.0.0.0/x", ""] {
            assert!(bad.parse::<Network>().is_err(), "{bad}");
        }
    }

    #[test]
    fn open_rules_admit_everyone() {
        let c = client("203.0.113.9", false, &[]);
        assert_eq!(AccessRules::open().decide("any", &c), Access::ReadWrite);
    }

    #[test]
    fn allow_lists_admit_by_address_and_name() {
        let rules = AccessRules::allow_list(vec![
            rule(&["vol0"], &["alice"], &[], false),
            rule(&["vol0"], &[], &["10.0.0.0/8"], true),
            rule(&["*"], &["backup"], &["192.0.2.0/24"], true),
        ]);
        let alice = client("198.51.100.1", true, &["alice"]);
        assert_eq!(rules.decide("vol0", &alice), Access::ReadWrite);
        assert_eq!(rules.decide("vol1", &alice), Access::Denied);
        // A name only counts under TLS.
        let claims = client("198.51.100.1", false, &["alice"]);
        assert_eq!(rules.decide("vol0", &claims), Access::NeedsTls);
        let lan = client("10.9.9.9", false, &[]);
        assert_eq!(rules.decide("vol0", &lan), Access::ReadOnly);
        let backup = client("192.0.2.10", true, &["backup"]);
        assert_eq!(rules.decide("vol1", &backup), Access::ReadOnly);
        let backup_elsewhere = client("198.51.100.2", true, &["backup"]);
        assert_eq!(rules.decide("vol1", &backup_elsewhere), Access::Denied);
        // Under TLS with the wrong certificate, TLS would not help.
        let mallory = client("198.51.100.1", true, &["mallory"]);
        assert_eq!(rules.decide("vol0", &mallory), Access::Denied);
        // Read-write wins over read-only when both admit.
        let alice_lan = client("10.0.0.1", true, &["alice"]);
        assert_eq!(rules.decide("vol0", &alice_lan), Access::ReadWrite);
    }

    #[test]
    fn unix_clients_match_only_rules_without_addresses() {
        let rules = AccessRules::allow_list(vec![rule(&["v"], &[], &["127.0.0.1"], false)]);
        let local = ClientIdentity::default();
        assert_eq!(rules.decide("v", &local), Access::Denied);
        let rules = AccessRules::allow_list(vec![rule(&["v"], &[], &[], true)]);
        assert_eq!(rules.decide("v", &local), Access::ReadOnly);
    }
}
