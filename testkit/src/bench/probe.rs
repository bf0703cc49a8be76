//! What the benches measure besides request latency: CPU of the server and
//! of the load generator over a window, a `/healthz` prober running beside
//! a scenario, and events pages read without building their items.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::client::{Conn, Res};
use super::{cpu_time, ms, percentile};

/// CPU readings at the start of a window.
pub struct Meter {
    t0: Instant,
    pid: Option<u32>,
    server0: Option<Duration>,
    own0: Duration,
}

/// CPU used over a window: the server's (all threads, when its pid is
/// known) and this process's (clients and mock provider).
#[derive(Clone, Copy)]
pub struct Usage {
    pub wall: Duration,
    pub server: Option<Duration>,
    pub generator: Duration,
}

impl Meter {
    pub fn start(pid: Option<u32>) -> Meter {
        Meter {
            t0: Instant::now(),
            pid,
            server0: pid.and_then(cpu_time),
            own0: cpu_time(std::process::id()).unwrap_or_default(),
        }
    }

    pub fn finish(&self) -> Usage {
        let server = match (self.pid.and_then(cpu_time), self.server0) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then)),
            _ => None,
        };
        let own = cpu_time(std::process::id()).unwrap_or_default();
        Usage {
            wall: self.t0.elapsed(),
            server,
            generator: own.saturating_sub(self.own0),
        }
    }
}

impl Usage {
    /// Server CPU per unit of `units`.
    pub fn server_per(&self, units: usize) -> Option<Duration> {
        Some(self.server? / u32::try_from(units.max(1)).unwrap_or(u32::MAX))
    }

    fn cores(d: Duration, wall: Duration) -> f64 {
        d.as_secs_f64() / wall.as_secs_f64().max(1e-9)
    }

    /// Whether the generator was the limit: together the two used at
    /// least 90 % of the box's cores, and the generator at least as much as
    /// the server. Rates taken then are the box's, not the server's.
    pub fn generator_bound(&self) -> bool {
        let cpus = thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let generator = Self::cores(self.generator, self.wall);
        let Some(server) = self.server.map(|s| Self::cores(s, self.wall)) else {
            return generator >= 0.9 * cpus;
        };
        server + generator >= 0.9 * cpus && generator >= server
    }
}

impl fmt::Display for Usage {
    /// `server 1.02 cores, generator 0.71 cores` plus a warning when the
    /// generator was the limit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.server {
            Some(s) => write!(f, "server {:.2} cores, ", Self::cores(s, self.wall))?,
            None => write!(f, "server CPU unknown (no --pid), ")?,
        }
        write!(
            f,
            "generator {:.2} cores",
            Self::cores(self.generator, self.wall)
        )?;
        if self.generator_bound() {
            write!(f, " (GENERATOR-BOUND: the box is saturated and the generator uses as much as the server; rates are lower bounds)")?;
        }
        Ok(())
    }
}

/// Latencies of `GET /healthz` taken every 5 ms on one keep-alive
/// connection while a scenario runs.
pub struct HealthProbe {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Res<Vec<Duration>>>,
}

/// p50, p99 and max of a probe, and how many probes.
pub struct ProbeResult {
    pub n: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "/healthz p50 {} p99 {} max {} ({} probes)",
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.n
        )
    }
}

impl HealthProbe {
    pub fn start(addr: SocketAddr) -> HealthProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = thread::spawn(move || {
            let mut c = Conn::open(addr)?;
            let mut lat = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let r = c.request("GET", "/healthz", None, b"")?;
                if r.status != 200 {
                    return Err(format!("/healthz answered {}", r.status));
                }
                lat.push(t0.elapsed());
                thread::sleep(Duration::from_millis(5));
            }
            Ok(lat)
        });
        HealthProbe { stop, handle }
    }

    pub fn finish(self) -> Res<ProbeResult> {
        self.stop.store(true, Ordering::Relaxed);
        let mut lat = self.handle.join().map_err(|_| "probe panicked")??;
        lat.sort();
        Ok(ProbeResult {
            n: lat.len(),
            p50: percentile(&lat, 0.50),
            p99: percentile(&lat, 0.99),
            max: lat.last().copied().unwrap_or_default(),
        })
    }
}

/// An events page (`{"items": [...], "next_cursor": ...}`) read without
/// building its items: the parser still checks every byte, as a client
/// that skips what it does not need would.
#[derive(Debug, PartialEq, Eq)]
pub struct PageScan {
    pub items: usize,
    pub next_cursor: Option<String>,
}

impl PageScan {
    pub fn parse(body: &[u8]) -> Res<PageScan> {
        serde_json::from_slice(body).map_err(|e| format!("events page: {e}"))
    }
}

/// The length of a JSON array whose elements are skipped.
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(V)
    }
}

impl<'de> Deserialize<'de> for PageScan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PageScan, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PageScan;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an events page object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PageScan, A::Error> {
                let mut page = PageScan {
                    items: 0,
                    next_cursor: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "items" => page.items = map.next_value::<Count>()?.0,
                        "next_cursor" => page.next_cursor = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(page)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::PageScan;

    #[test]
    fn a_page_is_counted_without_its_items() {
        let body = br#"{"items":[{"seq":1,"payload":{"a":[1,2]}},{"seq":2}],"next_cursor":"c2"}"#;
        assert_eq!(
            PageScan::parse(body).unwrap(),
            PageScan {
                items: 2,
                next_cursor: Some("c2".into())
            }
        );
        let last = br#"{"next_cursor": null, "items": []}"#;
        assert_eq!(
            PageScan::parse(last).unwrap(),
            PageScan {
                items: 0,
                next_cursor: None
            }
        );
        assert!(PageScan::parse(b"{\"items\": 3}").is_err());
    }
}
