//! The daemon's Prometheus metrics (OpenMetrics text, written by `prometheus-client`), served at
//! `GET /metrics` on the WebSocket door and the metrics address (see `http`).
//!
//! Two kinds: events counted as they happen ([`Metrics`]: spawn latency, kills and the
//! processes that survived them, recovered sessions, connections), and figures read at scrape
//! time from the same sources as the `stats` method (sessions by state, bytes spooled, dropped,
//! held; RSS), so a scrape and a `stats` call agree.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use stockade_engine::EngineStats;

/// Spawn latency buckets, seconds: 100 µs … 10 s.
const SPAWN_BUCKETS: [f64; 12] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 10.0];

/// Events counted as they happen. Cheap to update from any task.
#[derive(Debug, Clone)]
pub(crate) struct Metrics {
    spawn_seconds: Histogram,
    spawn_failures: Counter,
    kills: Counter,
    terminate_survivors: Counter,
    recovered: Counter,
    connections: Gauge<i64, std::sync::atomic::AtomicI64>,
    connections_total: Counter,
    reloads: Counter,
    reload_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            spawn_seconds: Histogram::new(SPAWN_BUCKETS),
            spawn_failures: Counter::default(),
            kills: Counter::default(),
            terminate_survivors: Counter::default(),
            recovered: Counter::default(),
            connections: Gauge::default(),
            connections_total: Counter::default(),
            reloads: Counter::default(),
            reload_failures: Counter::default(),
        }
    }
}

/// A session-state label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

/// Holds one open connection in the `connections` gauge until dropped.
#[derive(Debug)]
pub(crate) struct ConnectionGuard(Gauge<i64, std::sync::atomic::AtomicI64>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// A spawn took `took` (ok or not).
    pub(crate) fn spawned(&self, took: Duration, ok: bool) {
        self.spawn_seconds.observe(took.as_secs_f64());
        if !ok {
            self.spawn_failures.inc();
        }
    }

    /// A kill finished, leaving `survivors` processes behind.
    pub(crate) fn killed(&self, survivors: usize) {
        self.kills.inc();
        self.terminate_survivors.inc_by(survivors as u64);
    }

    /// Start-up recovery marked `n` sessions of a dead daemon `failed`.
    pub(crate) fn recovered(&self, n: usize) {
        self.recovered.inc_by(n as u64);
    }

    /// A connection opened (any door); it counts as open until the guard drops.
    pub(crate) fn connection(&self) -> ConnectionGuard {
        self.connections.inc();
        self.connections_total.inc();
        ConnectionGuard(self.connections.clone())
    }

    /// A token or certificate was read again: `ok`, or kept as it was because the new one
    /// could not be used.
    pub(crate) fn reloaded(&self, ok: bool) {
        let counter = if ok { &self.reloads } else { &self.reload_failures };
        counter.inc();
    }

    /// Everything, in the OpenMetrics text format, with the figures of `stats` (read by the
    /// caller from the engine at scrape time).
    pub(crate) fn encode(&self, stats: &EngineStats) -> Result<String, std::fmt::Error> {
        let mut r = Registry::with_prefix("stockade");
        r.register_with_unit(
            "spawn",
            "Time to start a session (fork, exec, spool, record)",
            Unit::Seconds,
            self.spawn_seconds.clone(),
        );
        r.register("spawn_failures", "Runs that could not be started", self.spawn_failures.clone());
        r.register("kills", "Kill requests carried out", self.kills.clone());
        r.register(
            "terminate_survivors",
            "Processes still alive after a kill gave up verifying",
            self.terminate_survivors.clone(),
        );
        r.register(
            "recovered_sessions",
            "Sessions of a dead daemon marked failed at start-up",
            self.recovered.clone(),
        );
        r.register("connections", "Client connections open now", self.connections.clone());
        r.register(
            "connections_opened",
            "Client connections accepted",
            self.connections_total.clone(),
        );
        r.register("reloads", "Tokens and certificates read again", self.reloads.clone());
        r.register(
            "reload_failures",
            "Reloads of a token or certificate that failed (the one in use was kept)",
            self.reload_failures.clone(),
        );

        let (ready, built) = stockade_proc::sandbox::ruleset_counts();
        let counter = |n: u64| {
            let c: Counter = Counter::default();
            c.inc_by(n);
            c
        };
        r.register(
            "sandbox_rulesets_ready",
            "Sandboxed runs whose Landlock ruleset was built ahead of their spawn",
            counter(ready),
        );
        r.register(
            "sandbox_rulesets_built_on_spawn",
            "Sandboxed runs that built their Landlock ruleset while the client waited",
            counter(built),
        );

        let sessions = Family::<StateLabel, Gauge>::default();
        for (state, n) in &stats.sessions {
            sessions.get_or_create(&StateLabel { state: state.clone() }).set(gauge(*n));
        }
        r.register("sessions", "Sessions known to the daemon, by state", sessions);
        let (rss, peak) = crate::memory::rss();
        for (name, help, value) in [
            ("spooled", "Output bytes on disk in spools", stats.spooled_bytes),
            ("dropped", "Output bytes not kept (disk cap or disk full)", stats.dropped_bytes),
            ("output", "Output bytes printed by all sessions", stats.output_bytes),
            ("hot_tail", "Output bytes held in memory", stats.hot_tail_bytes),
            ("resident_memory", "Daemon resident set size", rss),
            ("resident_memory_peak", "Daemon peak resident set size", peak),
        ] {
            let g = Gauge::<u64, AtomicU64>::default();
            g.set(value);
            r.register_with_unit(name, help, Unit::Bytes, g);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r)?;
        Ok(out)
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
