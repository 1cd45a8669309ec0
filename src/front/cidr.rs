//! Networks written in CIDR notation (RFC 4632, RFC 4291 §2.3): `10.0.0.0/8`, `::1/128`, or a
//! bare address for itself alone; and whether a peer's address is in one. An IPv4 peer that
//! reaches an IPv6 socket (`::ffff:10.0.0.7`) is the IPv4 address it is.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// A network: an address and how many of its leading bits every member shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a text is not a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("{0:?} is not an IP address or network (10.0.0.0/8, ::1/128)")]
    Address(String),
    #[error("{text:?}: a prefix length is 0 to {max}")]
    Prefix { text: String, max: u8 },
    /// Bits set past the prefix: a typo for a host, or for another network; said, not guessed.
    #[error("{text:?} has bits set past its prefix length: write {network}")]
    HostBits { text: String, network: Cidr },
}

impl Cidr {
    /// Whether this network holds a loopback address (any of 127.0.0.0/8, or ::1): one the
    /// proxy's own processes can send from.
    pub fn holds_loopback(&self) -> bool {
        self.network.to_canonical().is_loopback()
            || self.contains(std::net::Ipv4Addr::new(127, 0, 0, 0).into())
            || self.contains(std::net::Ipv6Addr::LOCALHOST.into())
    }

    /// Whether `address` is in this network.
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                masked(u32::from(address).into(), self.prefix, 32) == u32::from(network).into()
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                masked(u128::from(address), self.prefix, 128) == u128::from(network)
            }
            _ => false,
        }
    }

    /// The network of `address` with `prefix` leading bits.
    fn masked(address: IpAddr, prefix: u8) -> Cidr {
        let network = match address {
            IpAddr::V4(v4) => {
                let bits = masked(u32::from(v4).into(), prefix, 32);
                IpAddr::V4(u32::try_from(bits).unwrap_or_default().into())
            }
            IpAddr::V6(v6) => IpAddr::V6(masked(u128::from(v6), prefix, 128).into()),
        };
        Cidr { network, prefix }
    }
}

/// `bits` (of a `width`-bit address) with everything past the first `prefix` bits cleared.
fn masked(bits: u128, prefix: u8, width: u8) -> u128 {
    let cleared = u32::from(width - prefix);
    let mask = u128::MAX.checked_shl(cleared).unwrap_or(0);
    bits & mask & (u128::MAX >> (128 - u32::from(width)))
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Cidr, CidrError> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| CidrError::Address(text.to_owned()))?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max && !prefix.starts_with('+'))
                .ok_or_else(|| CidrError::Prefix {
                    text: text.to_owned(),
                    max,
                })?,
        };
        // ::ffff:10.0.0.0/104 is 10.0.0.0/8, which is how an IPv4 peer is compared.
        let (address, prefix) = match address {
            IpAddr::V6(v6) if prefix >= 96 => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (address, prefix),
            },
            _ => (address, prefix),
        };
        let network = Cidr::masked(address, prefix);
        if network.network != address {
            return Err(CidrError::HostBits {
                text: text.to_owned(),
                network,
            });
        }
        Ok(network)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cidr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_network_holds_loopback_if_any_of_its_addresses_is() {
        for holds in [
            "127.0.0.2/32",
            "127.0.0.0/8",
            "0.0.0.0/0",
            "::1/128",
            "::/0",
            "64.0.0.0/2",
        ] {
            assert!(holds.parse::<Cidr>().unwrap().holds_loopback(), "{holds}");
        }
        for not in ["10.0.0.0/8", "192.168.0.0/16", "fd00::/8"] {
            assert!(!not.parse::<Cidr>().unwrap().holds_loopback(), "{not}");
        }
    }

    #[test]
    fn networks_hold_their_addresses_and_no_others() {
        let private = cidr("10.0.0.0/8");
        assert!(private.contains(ip("10.0.0.0")));
        assert!(private.contains(ip("10.255.255.255")));
        assert!(!private.contains(ip("11.0.0.0")));
        assert!(!private.contains(ip("9.255.255.255")));
        let one = cidr("127.0.0.1");
        assert_eq!(one, cidr("127.0.0.1/32"));
        assert!(one.contains(ip("127.0.0.1")));
        assert!(!one.contains(ip("127.0.0.2")));
        let everyone = cidr("0.0.0.0/0");
        assert!(everyone.contains(ip("203.0.113.9")));
        assert!(
            !everyone.contains(ip("::2")),
            "IPv4 networks hold IPv4 peers"
        );
        let loopback = cidr("::1/128");
        assert!(loopback.contains(ip("::1")));
        assert!(!loopback.contains(ip("::2")));
        let v6 = cidr("fd00:1::/32");
        assert!(v6.contains(ip("fd00:1:ffff::7")));
        assert!(!v6.contains(ip("fd00:2::7")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
    }

    #[test]
    fn an_ipv4_peer_on_an_ipv6_socket_is_its_ipv4_address() {
        assert!(cidr("10.0.0.0/8").contains(ip("::ffff:10.1.2.3")));
        assert!(!cidr("10.0.0.0/8").contains(ip("::ffff:11.1.2.3")));
        let mapped = cidr("::ffff:10.0.0.0/104");
        assert_eq!(mapped, cidr("10.0.0.0/8"));
        assert!(mapped.contains(ip("10.9.9.9")));
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
    }

    #[test]
    fn what_is_not_a_network_is_said_and_not_guessed() {
        for bad in [
            "",
            "10.0.0",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/+8",
            "x/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert_eq!(
            "10.0.0.1/8".parse::<Cidr>(),
            Err(CidrError::HostBits {
                text: "10.0.0.1/8".into(),
                network: cidr("10.0.0.0/8"),
            })
        );
        let error = "10.0.0.1/8".parse::<Cidr>().unwrap_err().to_string();
        assert!(error.contains("write 10.0.0.0/8"), "{error}");
        assert_eq!(cidr(" fd00::/8 ").to_string(), "fd00::/8");
    }
}
