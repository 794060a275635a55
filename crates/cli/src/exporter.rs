//! `tarn exporter`: the counters of `tarn stats`, for every imported pool, served to
//! Prometheus over HTTP at `/metrics`.
//!
//! Owns: the listening address policy and the HTTP side (tiny_http). Promises: it
//! listens on a loopback address unless `--allow-remote` is given; a scrape reads each
//! pool's counters from the same source as `tarn stats` (a mounted pool's daemon, over
//! its control socket; a pool no daemon holds is opened and closed, at most once a minute, since
//! its counters are those of a freshly opened pool anyway); a pool whose counters cannot
//! be read does not fail the scrape: `tarn_pool_stats_ok` says 0 for it and the reason
//! goes to stderr. Must never: keep a pool open between scrapes (a mount would then
//! find its devices busy), or answer a scrape with a partial document.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use tarn_pool::PoolStats;
use tiny_http::{Header, Method, Response, Server};

use crate::access;
use crate::error::CliError;
use crate::metrics;
use crate::stats_cmd::pool_stats;

/// How long the counters of a pool no daemon holds are reused before it is opened again.
const UNHELD_REUSE: Duration = Duration::from_secs(60);

/// `tarn exporter [--listen ADDR:PORT] [--allow-remote]`: serves until killed.
pub fn run(listen: &str, allow_remote: bool) -> Result<(), CliError> {
    let addr = listen_address(listen, allow_remote)?;
    let server = Server::http(addr).map_err(|e| CliError::Refused(format!("cannot listen on {listen}: {e}")))?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    // The bound address (a --listen port of 0 picks a free one), for the log and tests.
    println!("tarn exporter: serving http://{bound}/metrics");
    let mut scraper = Scraper::default();
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or_default().to_string();
        let response = match (request.method(), path.as_str()) {
            (Method::Get | Method::Head, "/metrics") => match scraper.scrape() {
                Ok(text) => {
                    Response::from_string(text).with_header(content_type("text/plain; version=0.0.4; charset=utf-8"))
                }
                Err(e) => Response::from_string(format!("tarn exporter: {}\n", e.one_line())).with_status_code(500),
            },
            (Method::Get | Method::Head, "/") => Response::from_string("tarn exporter: the counters are at /metrics\n"),
            (_, "/metrics" | "/") => Response::from_string("only GET\n").with_status_code(405),
            _ => Response::from_string("not found: the counters are at /metrics\n").with_status_code(404),
        };
        // A scraper that went away before the answer costs nothing but that answer.
        let _ = request.respond(response);
    }
    Ok(())
}

/// The one address to listen on: `listen` resolved, and refused if it is not loopback
/// unless `allow_remote`.
fn listen_address(listen: &str, allow_remote: bool) -> Result<SocketAddr, CliError> {
    let bad = |why: String| CliError::Usage(format!("invalid --listen '{listen}': {why}"));
    let addr = listen
        .to_socket_addrs()
        .map_err(|e| bad(format!("{e}; give ADDR:PORT, like 127.0.0.1:9436")))?
        .next()
        .ok_or_else(|| bad("it names no address".into()))?;
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(CliError::Usage(format!(
            "--listen {listen} is not a loopback address: the counters would be served to other hosts; add --allow-remote if that is meant"
        )));
    }
    Ok(addr)
}

fn content_type(value: &str) -> Header {
    // A header built from constant ASCII words: from_bytes fails only on non-ASCII.
    Header::from_bytes(&b"Content-Type"[..], value.as_bytes()).expect("an ASCII content type")
}

/// Counters of pools no daemon holds, with when they were read.
#[derive(Default)]
struct Scraper {
    unheld: HashMap<String, (Instant, PoolStats)>,
}

impl Scraper {
    /// The exposition text for every imported pool; Err only if the pool cache itself
    /// cannot be read.
    fn scrape(&mut self) -> Result<String, CliError> {
        let names = access::pool_names(None)?;
        self.unheld.retain(|name, _| names.contains(name));
        let mut read = Vec::new();
        let mut ok = Vec::new();
        for name in names {
            match self.counters(&name) {
                Ok(stats) => {
                    read.push((name.clone(), stats));
                    ok.push((name, 1));
                }
                Err(e) => {
                    eprintln!("tarn exporter: pool '{name}': {}", e.one_line());
                    ok.push((name, 0));
                }
            }
        }
        let mut text = String::from(
            "# HELP tarn_pool_stats_ok 1 if the pool's counters could be read for this scrape, else 0 (the exporter's stderr says why).\n# TYPE tarn_pool_stats_ok gauge\n",
        );
        for (name, v) in ok {
            text.push_str(&format!("tarn_pool_stats_ok{{pool=\"{}\"}} {v}\n", metrics::escape_label(&name)));
        }
        text.push_str(&metrics::render(&read, None));
        Ok(text)
    }

    /// A held pool's counters from its daemon (fresh each scrape); an unheld pool's, reused
    /// for [`UNHELD_REUSE`] after it was opened.
    fn counters(&mut self, pool: &str) -> Result<PoolStats, CliError> {
        if let Some(mut daemon) = access::held(pool)? {
            self.unheld.remove(pool);
            return Ok(daemon.call(&tarn_control::ops::pool::Stats {})?);
        }
        if let Some((at, stats)) = self.unheld.get(pool) {
            if at.elapsed() < UNHELD_REUSE {
                return Ok(stats.clone());
            }
        }
        let stats = pool_stats(pool)?;
        self.unheld.insert(pool.to_string(), (Instant::now(), stats.clone()));
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_the_default_and_remote_needs_to_be_asked_for() {
        assert!(listen_address("127.0.0.1:9436", false).is_ok());
        assert!(listen_address("[::1]:9436", false).is_ok());
        let e = listen_address("0.0.0.0:9436", false).expect_err("any address");
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("--allow-remote"), "{e}");
        assert!(listen_address("0.0.0.0:9436", true).is_ok());
        let e = listen_address("9436", false).expect_err("no address");
        assert!(e.to_string().contains("ADDR:PORT"), "{e}");
    }
}
