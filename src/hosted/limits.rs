//! Hosted calls per client address (docs/PROTOCOL.md, "Hosted voice"): at most so many running at
//! once and so many started in the last minute. An address is an IPv4 address or an IPv6 /64, as
//! the relay's connection limit counts them.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::relay::service::ClientKey;

/// Hosted calls one address runs at once unless the operator says otherwise.
pub const DEFAULT_CALLS_PER_ADDRESS: usize = 4;
/// Hosted calls one address starts per minute unless the operator says otherwise.
pub const DEFAULT_STARTS_PER_MINUTE: usize = 10;
/// The window call starts are counted in.
pub const START_WINDOW: Duration = Duration::from_secs(60);
/// Addresses followed at once; past it a new address is refused until old starts expire.
const MAX_ADDRESSES: usize = 1 << 16;

/// Why an address may not start a call now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressRefusal {
    /// It runs as many calls as allowed.
    Calls(usize),
    /// It started as many calls as allowed in the last minute; one more fits after this long.
    Starts(usize, Duration),
}

impl AddressRefusal {
    /// The `reason` label of the relay's `live_refusals` metric.
    pub fn metric(self) -> &'static str {
        match self {
            AddressRefusal::Calls(_) => "address-calls",
            AddressRefusal::Starts(..) => "address-starts",
        }
    }

    /// What the phone is told.
    pub fn message(self) -> String {
        match self {
            AddressRefusal::Calls(max) => {
                format!("this network already runs as many calls on the relay as its operator allows ({max} at once)")
            }
            AddressRefusal::Starts(max, wait) => format!(
                "this network started as many calls on the relay in the last minute as its operator allows \
                 ({max} a minute); try again in {} s",
                wait.as_secs().max(1)
            ),
        }
    }
}

/// Calls running and recently started, per address.
#[derive(Debug)]
pub struct AddressLimits {
    calls: usize,
    starts: usize,
    held: Mutex<HashMap<ClientKey, Usage>>,
}

#[derive(Debug, Default)]
struct Usage {
    running: usize,
    /// Start times within the window, oldest first (at most `starts` of them).
    started: VecDeque<Instant>,
}

impl AddressLimits {
    /// `calls` at once and `starts` per minute per address (each at least 1).
    pub fn new(calls: usize, starts: usize) -> Arc<AddressLimits> {
        Arc::new(AddressLimits { calls: calls.max(1), starts: starts.max(1), held: Mutex::default() })
    }

    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn starts(&self) -> usize {
        self.starts
    }

    /// A call for `client`, counted until the slot is dropped, or why not.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<AddressSlot, AddressRefusal> {
        let key = ClientKey::from(client);
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.len() >= MAX_ADDRESSES && !held.contains_key(&key) {
            held.retain(|_, usage| {
                usage.expire(now);
                !usage.is_idle()
            });
            if held.len() >= MAX_ADDRESSES {
                return Err(AddressRefusal::Starts(self.starts, START_WINDOW));
            }
        }
        let usage = held.entry(key).or_default();
        usage.expire(now);
        if usage.running >= self.calls {
            return Err(AddressRefusal::Calls(self.calls));
        }
        if usage.started.len() >= self.starts {
            let oldest = usage.started.front().copied().unwrap_or(now);
            return Err(AddressRefusal::Starts(self.starts, START_WINDOW.saturating_sub(now - oldest)));
        }
        usage.running += 1;
        usage.started.push_back(now);
        Ok(AddressSlot { limits: Arc::clone(self), key })
    }

    fn release(&self, key: ClientKey) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(usage) = held.get_mut(&key) {
            usage.running = usage.running.saturating_sub(1);
            usage.expire(Instant::now());
            if usage.is_idle() {
                held.remove(&key);
            }
        }
    }
}

impl Usage {
    fn expire(&mut self, now: Instant) {
        while self.started.front().is_some_and(|at| now.duration_since(*at) >= START_WINDOW) {
            self.started.pop_front();
        }
    }

    fn is_idle(&self) -> bool {
        self.running == 0 && self.started.is_empty()
    }
}

/// One running call of an address; dropping it frees the place.
#[derive(Debug)]
pub struct AddressSlot {
    limits: Arc<AddressLimits>,
    key: ClientKey,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        self.limits.release(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_runs_and_starts_at_most_its_share_and_others_are_untouched() {
        let limits = AddressLimits::new(2, 3);
        let (home, other): (IpAddr, IpAddr) = ("203.0.113.7".parse().unwrap(), "198.51.100.1".parse().unwrap());
        let first = limits.admit(home).unwrap();
        let _second = limits.admit(home).unwrap();
        assert_eq!(limits.admit(home).unwrap_err(), AddressRefusal::Calls(2));
        let _elsewhere = limits.admit(other).expect("another address has its own share");
        drop(first);
        let third = limits.admit(home).expect("a freed place");
        drop(third);
        let refused = limits.admit(home).unwrap_err();
        assert!(matches!(refused, AddressRefusal::Starts(3, wait) if wait <= START_WINDOW), "{refused:?}");
        assert!(refused.message().contains("in the last minute"), "{}", refused.message());
        assert_eq!((refused.metric(), AddressRefusal::Calls(1).metric()), ("address-starts", "address-calls"));
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_idle_addresses_are_forgotten() {
        let limits = AddressLimits::new(1, 10);
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let slot = limits.admit(one).unwrap();
        assert_eq!(limits.admit(same_64).unwrap_err(), AddressRefusal::Calls(1));
        assert!(limits.admit("2001:db8:1:3::1".parse().unwrap()).is_ok());
        drop(slot);
        assert_eq!(limits.held.lock().unwrap().len(), 2, "recent starts are kept for their minute");
    }
}
