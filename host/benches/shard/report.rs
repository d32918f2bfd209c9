//! The shard benchmark's figures and how they are printed: a line per run as it ends, then
//! Markdown tables of the medians, the ratios, and a verdict per target of issue 27.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::handover::{Reconciles, Writes, between};
use crate::measure::median;
use crate::{Settings, heap};

/// A ring member's Lease duration (the default of `--leader-elect-lease-duration`).
const LEASE: Duration = Duration::from_secs(15);

/// One convergence of the parents by `replicas` replicas.
pub struct Throughput {
    /// Replicas in the ring.
    pub replicas: usize,
    /// Parents created and converged.
    pub parents: usize,
    /// How long creating the parents took.
    pub created: Duration,
    /// From the first create until the last parent converged.
    pub converged: Duration,
    /// Reconciles of webapp in that time, all replicas, from their logs.
    pub reconciles: f64,
    /// What `controller_runtime_reconcile_total` counted in that time, all replicas: the
    /// reconciles and, with sharding, the keys skipped because their parent had moved.
    pub counted: f64,
    /// CPU time of all replicas in that time (their cgroups').
    pub cpu: Duration,
    /// Each replica's CPU time over its quota's worth in that time.
    pub quota_used: Vec<f64>,
    /// Each replica's share of CFS periods in which its quota held it back.
    pub throttled: Vec<f64>,
    /// CPU time of the control plane's processes in that time.
    pub control_plane: Duration,
    /// Busy CPU time of the whole machine in that time.
    pub machine: Duration,
    /// Each replica's resident memory at rest after converging, MiB.
    pub rss: Vec<f64>,
    /// Of that, the anonymous part, MiB: the process's own, without the pages of its binary
    /// (which every replica on a node maps from one page cache), as cAdvisor's
    /// `container_memory_rss` counts a container's.
    pub anon: Vec<f64>,
    /// Each replica's resident memory with the ring settled and no parent yet, MiB: what
    /// does not depend on the parents (the binary, the runtime, the compiled plugin).
    pub idle: Vec<f64>,
    /// Of that, the anonymous part, MiB.
    pub idle_anon: Vec<f64>,
    /// The children each replica's caches held whole and as stubs, converged.
    pub children: Vec<(f64, f64)>,
    /// Each replica's peak resident memory, MiB.
    pub peak: Vec<f64>,
    /// The parents each replica owns, as its metrics say.
    pub owned: Vec<f64>,
    /// The parents each replica gained or lost since it started (none expected: the ring
    /// settled before the parents were created).
    pub moved: Vec<f64>,
    /// The replicas' writes (the audit log), and the parents written by more than one replica
    /// (none expected).
    pub writes: usize,
    /// See `writes`.
    pub shared: usize,
}

impl Throughput {
    /// Parents converged per second.
    fn per_second(&self) -> f64 {
        self.parents as f64 / self.converged.as_secs_f64()
    }

    /// CPU seconds of all replicas per parent converged.
    fn cpu_per_parent(&self) -> f64 {
        self.cpu.as_secs_f64() / self.parents as f64
    }

    fn cpu_per_1000(&self) -> f64 {
        self.cpu.as_secs_f64() / self.reconciles.max(1.0) * 1000.0
    }

    fn cores(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() / self.converged.as_secs_f64()
    }

    /// One line for the run.
    pub fn print_run(&self) {
        let list = |v: &[f64], digits: usize| {
            v.iter()
                .map(|x| format!("{x:.digits$}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        println!(
            "{} replica(s), {} parents: created in {:.1} s, converged in {:.1} s; {:.0} reconciles ({:.0} \
             counted by controller_runtime_reconcile_total); CPU {:.1} s ({:.2} s per 1,000); \
             quota used {}; periods throttled {}; control plane {:.2} cores, machine {:.2} cores; \
             RSS {} MiB (peak {}, {} with no parent; anonymous {}, {} with no parent); children whole/stub {}; owned {}; gained or lost {}; {} writes, {} parents written \
             by two replicas",
            self.replicas,
            self.parents,
            self.created.as_secs_f64(),
            self.converged.as_secs_f64(),
            self.reconciles,
            self.counted,
            self.cpu.as_secs_f64(),
            self.cpu_per_1000(),
            list(&self.quota_used, 2),
            list(&self.throttled, 2),
            self.cores(self.control_plane),
            self.cores(self.machine),
            list(&self.rss, 1),
            list(&self.peak, 1),
            list(&self.idle, 1),
            list(&self.anon, 1),
            list(&self.idle_anon, 1),
            self.children
                .iter()
                .map(|(w, s)| format!("{w:.0}/{s:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            list(&self.owned, 0),
            list(&self.moved, 0),
            self.writes,
            self.shared,
        );
    }
}

/// The parents one change of the ring moved.
pub struct Handover {
    /// What changed.
    label: &'static str,
    /// How many moved, by old owner.
    from: BTreeMap<String, usize>,
    /// For each, from the event to the new owner's first reconcile; sorted.
    pauses: Vec<Duration>,
    /// For each hot one, from the old owner's last write to the new owner's first reconcile;
    /// sorted.
    literal: Vec<Duration>,
    /// Writes by an old owner after its successor's first reconcile.
    late_writes: usize,
    /// When each replica that stayed published its next view, after the event.
    published: Vec<Duration>,
    /// How long before it joined a joining replica was ready (plugin loaded, caches synced),
    /// in seconds; negative if it joined first.
    ready: Option<f64>,
}

impl Handover {
    /// The figures of the change at `event`.
    pub fn of(
        label: &'static str,
        event: Timestamp,
        reconciles: &Reconciles,
        writes: &Writes,
        hot: &[String],
        mut published: Vec<Duration>,
        ready: Option<f64>,
    ) -> Self {
        let moved = reconciles.moved(event, writes);
        let mut from = BTreeMap::new();
        for m in &moved {
            *from.entry(m.from.clone()).or_default() += 1;
        }
        let mut pauses: Vec<Duration> = moved.iter().map(|m| between(event, m.first)).collect();
        pauses.sort();
        let mut literal: Vec<Duration> = moved
            .iter()
            .filter(|m| hot.contains(&m.parent))
            .filter_map(|m| Some(between(m.last_write?, m.first)))
            .collect();
        literal.sort();
        published.sort();
        Self {
            label,
            from,
            pauses,
            literal,
            late_writes: moved.iter().map(|m| m.late_writes).sum(),
            published,
            ready,
        }
    }

    fn p99(&self) -> Duration {
        percentile(&self.pauses, 0.99)
    }
}

/// The `p` quantile of sorted durations (nearest rank); zero for none.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn quantiles(sorted: &[Duration]) -> String {
    if sorted.is_empty() {
        return "-".into();
    }
    format!(
        "p50 {}, p99 {}, max {} (n = {})",
        secs(percentile(sorted, 0.5)),
        secs(percentile(sorted, 0.99)),
        secs(*sorted.last().expect("some")),
        sorted.len()
    )
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// The medians of the runs with `n` replicas.
struct Medians<'a> {
    runs: &'a [Throughput],
}

impl Medians<'_> {
    /// The median of a figure of each run.
    fn of(&self, n: usize, get: &dyn Fn(&Throughput) -> f64) -> f64 {
        median(
            self.runs
                .iter()
                .filter(|r| r.replicas == n)
                .map(get)
                .collect(),
        )
    }

    /// The median of a figure of each replica of each run.
    fn each(&self, n: usize, get: &dyn Fn(&Throughput) -> &Vec<f64>) -> f64 {
        median(
            self.runs
                .iter()
                .filter(|r| r.replicas == n)
                .flat_map(|r| get(r).iter().copied())
                .collect(),
        )
    }

    /// Parents converged per second.
    fn rate(&self, n: usize) -> f64 {
        self.of(n, &Throughput::per_second)
    }

    /// CPU seconds of all replicas per parent converged.
    fn cpu_per_parent(&self, n: usize) -> f64 {
        self.of(n, &Throughput::cpu_per_parent)
    }

    /// Parents per second the replicas' quotas allow at their CPU per parent: what they would
    /// converge if each used its whole quota and nothing else held them back.
    fn allowed(&self, n: usize, millicores: u64) -> f64 {
        n as f64 * millicores as f64 / 1000.0 / self.cpu_per_parent(n)
    }
}

/// Prints the tables and the verdicts.
pub fn print(s: &Settings, runs: &[Throughput], handovers: &[Handover]) {
    let m = Medians { runs };
    if !runs.is_empty() {
        println!(
            "\n{} parents, each replica held to {} millicores, medians of {} round(s)\n",
            s.parents, s.millicores, s.rounds
        );
        throughput_table(s, &m);
    }
    if !handovers.is_empty() {
        println!(
            "\n{} parents, each replica held to {} millicores; {} of them changing, each every {} ms\n",
            s.parents,
            s.handover_millicores,
            s.hot,
            s.churn.as_millis()
        );
        handover_table(handovers);
    }
    let all = (1..=3).all(|n| runs.iter().any(|r| r.replicas == n));
    if all || !handovers.is_empty() {
        println!("\nAgainst the targets of issue 27:");
    }
    if all {
        let ratio = m.rate(3) / m.rate(1);
        let allowed = m.allowed(3, s.millicores) / m.allowed(1, s.millicores);
        println!(
            "- throughput, 3 replicas over 1: {ratio:.2}×; their quotas allow {allowed:.2}× at \
             the CPU per parent measured (target ≥ 2.7×): {}",
            verdict(ratio >= 2.7)
        );
        let memory = m.each(3, &|r| &r.rss) / m.each(1, &|r| &r.rss);
        println!(
            "- memory per replica, 3 replicas over 1: {memory:.2}× (target ≤ 0.4×): {}",
            verdict(memory <= 0.4)
        );
        let anon = m.each(3, &|r| &r.anon) / m.each(1, &|r| &r.anon);
        println!(
            "- of that, the anonymous memory (without the binary's pages, which the replicas \
             on a node share): {:.1} MiB at 3 replicas, {:.1} MiB at 1: {anon:.2}×",
            m.each(3, &|r| &r.anon),
            m.each(1, &|r| &r.anon),
        );
        let above = |n| m.each(n, &|r| &r.rss) - m.each(n, &|r| &r.idle);
        println!(
            "- of that, the memory the parents cost (RSS over the same replica's with no \
             parent): {:.1} MiB at 3 replicas, {:.1} MiB at 1: {:.2}×",
            above(3),
            above(1),
            above(3) / above(1)
        );
    }
    let (Some(join), Some(kill)) = (handovers.first(), handovers.get(1)) else {
        return;
    };
    // Each pause judged both ways: from the event, for every moved parent, and as the issue
    // defines it, for the changing ones.
    let judge = |what: &str, h: &Handover, event: &str, bound: Duration| {
        let issue = if h.literal.is_empty() {
            String::new()
        } else {
            let p99 = percentile(&h.literal, 0.99);
            format!(
                "; as the issue defines it, p99 {} (n = {}): {}",
                secs(p99),
                h.literal.len(),
                verdict(p99 <= bound)
            )
        };
        println!(
            "- pause of {what} (target ≤ {}): p99 {} from the {event}: {}{issue}",
            secs(bound),
            secs(h.p99()),
            verdict(h.p99() <= bound)
        );
    };
    judge(
        "the parents a joining replica takes",
        join,
        "join",
        Duration::from_secs(2),
    );
    judge(
        "a killed replica's parents (lease duration + 2 s)",
        kill,
        "kill",
        LEASE + Duration::from_secs(2),
    );
}

fn throughput_table(s: &Settings, m: &Medians) {
    let ns: Vec<usize> = (1..=s.replicas).collect();
    let header: Vec<String> = ns.iter().map(|n| format!("{n} replica(s)")).collect();
    println!("| | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(ns.len()));
    let row = |name: &str, cell: &dyn Fn(usize) -> String| {
        let cells: Vec<String> = ns.iter().map(|n| cell(*n)).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("created (16 at a time)", &|n| {
        format!("{:.1} s", m.of(n, &|r| r.created.as_secs_f64()))
    });
    row("converged, from the first create", &|n| {
        format!(
            "{:.1} s ({:.1} parents/s)",
            m.of(n, &|r| r.converged.as_secs_f64()),
            m.rate(n)
        )
    });
    row("throughput over one replica's", &|n| {
        format!("{:.2}×", m.rate(n) / m.rate(1))
    });
    row("reconciles per parent (from the logs)", &|n| {
        format!("{:.2}", m.of(n, &|r| r.reconciles / r.parents as f64))
    });
    row(
        "controller_runtime_reconcile_total over those reconciles",
        &|n| format!("{:.2}×", m.of(n, &|r| r.counted / r.reconciles.max(1.0))),
    );
    row("host CPU per 1,000 reconciles (all replicas)", &|n| {
        format!("{:.2} s", m.of(n, &|r| r.cpu_per_1000()))
    });
    row("host CPU per parent converged (all replicas)", &|n| {
        format!("{:.2} ms", 1e3 * m.cpu_per_parent(n))
    });
    row(
        "throughput the quotas allow (replicas × quota ÷ CPU per parent)",
        &|n| {
            format!(
                "{:.1} parents/s ({:.2}× one replica's)",
                m.allowed(n, s.millicores),
                m.allowed(n, s.millicores) / m.allowed(1, s.millicores)
            )
        },
    );
    row("each replica's CPU over its quota while converging", &|n| {
        format!("{:.0} %", 100.0 * m.each(n, &|r| &r.quota_used))
    });
    row("CFS periods in which the quota stopped a replica", &|n| {
        format!("{:.0} %", 100.0 * m.each(n, &|r| &r.throttled))
    });
    row(
        "control plane CPU / whole machine busy (of 2 cores)",
        &|n| {
            format!(
                "{:.2} / {:.2} cores",
                m.of(n, &|r| r.cores(r.control_plane)),
                m.of(n, &|r| r.cores(r.machine))
            )
        },
    );
    row("RSS per replica at rest, converged (peak)", &|n| {
        format!(
            "{:.1} MiB ({:.1})",
            m.each(n, &|r| &r.rss),
            m.each(n, &|r| &r.peak)
        )
    });
    row(
        "RSS per replica with the ring settled, no parent yet",
        &|n| format!("{:.1} MiB", m.each(n, &|r| &r.idle)),
    );
    row("of which anonymous: converged / no parent yet", &|n| {
        format!(
            "{:.1} / {:.1} MiB",
            m.each(n, &|r| &r.anon),
            m.each(n, &|r| &r.idle_anon)
        )
    });
    row(
        "children cached whole / as stubs per replica (last run)",
        &|n| {
            m.runs
                .iter()
                .rfind(|r| r.replicas == n)
                .map(|r| {
                    r.children
                        .iter()
                        .map(|(w, s)| format!("{w:.0}/{s:.0}"))
                        .collect::<Vec<_>>()
                        .join(" · ")
                })
                .unwrap_or_default()
        },
    );
    row("parents owned per replica (last run)", &|n| {
        m.runs
            .iter()
            .rfind(|r| r.replicas == n)
            .map(|r| {
                r.owned
                    .iter()
                    .map(|o| format!("{o:.0}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            })
            .unwrap_or_default()
    });
}

fn handover_table(handovers: &[Handover]) {
    let row = |name: &str, cell: &dyn Fn(&Handover) -> String| {
        let cells: Vec<String> = handovers.iter().map(cell).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("", &|h| h.label.to_owned());
    println!("|---|{}", "---|".repeat(handovers.len()));
    row("parents moved", &|h| {
        let by: Vec<String> = h
            .from
            .iter()
            .map(|(r, n)| format!("{n} from {r}"))
            .collect();
        format!("{} ({})", h.pauses.len(), by.join(", "))
    });
    row("pause: event → new owner's first reconcile", &|h| {
        quantiles(&h.pauses)
    });
    row(
        "pause as the issue defines it: old owner's last write → new owner's first reconcile (the changing parents that moved)",
        &|h| quantiles(&h.literal),
    );
    row(
        "the replicas that stayed published their next view, after the event",
        &|h| {
            h.published
                .iter()
                .map(|d| secs(*d))
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    row(
        "the joining replica ready (plugin loaded, caches synced), before its Lease was created",
        &|h| h.ready.map_or("-".into(), |s| format!("{s:.2} s")),
    );
    row(
        "writes by an old owner after its successor's first reconcile",
        &|h| h.late_writes.to_string(),
    );
}

/// Prints the side-by-side rounds (`SHARD_BESIDE`): one replica and three at the same time,
/// three over three times the parents, and the verdict on throughput from their ratios.
pub fn print_beside(s: &Settings, rounds: &[(Throughput, Throughput)]) {
    if rounds.is_empty() {
        return;
    }
    println!(
        "\nSide by side: 1 replica over {} parents and 3 replicas over {}, at the same time, \
         each replica held to {} millicores\n",
        s.parents,
        3 * s.parents,
        s.millicores
    );
    println!(
        "| round | 1 replica: converged | 3 replicas: converged | CPU per parent, 1 / 3 | \
         largest share of 3 | control plane / machine busy | 3 over 1 |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut ratios = Vec::new();
    for (round, (one, three)) in rounds.iter().enumerate() {
        let ratio = three.per_second() / one.per_second();
        ratios.push(ratio);
        let largest = three.owned.iter().copied().fold(0.0, f64::max);
        // The control plane's and the machine's CPU are the whole machine's, both rings' load,
        // over the three's window.
        println!(
            "| {round} | {:.1} s ({:.2} parents/s) | {:.1} s ({:.2} parents/s) | {:.2} / {:.2} ms | \
             {largest:.0} of {} | {:.2} / {:.2} cores | **{ratio:.2}×** |",
            one.converged.as_secs_f64(),
            one.per_second(),
            three.converged.as_secs_f64(),
            three.per_second(),
            1e3 * one.cpu_per_parent(),
            1e3 * three.cpu_per_parent(),
            three.parents,
            three.cores(three.control_plane),
            three.cores(three.machine),
        );
    }
    let ratio = median(ratios);
    println!(
        "\n- throughput, 3 replicas over 1, side by side: {ratio:.2}× (median of {} round(s); \
         target ≥ 2.7×): {}",
        rounds.len(),
        verdict(ratio >= 2.7)
    );
}

/// Prints each of `n` replicas' live heap at rest (`SHARD_HEAP_HOST`), by where the host
/// allocated it: the largest sites of any replica, in KiB, one column per replica, so that what
/// falls with a replica's share of the parents and what every replica holds whatever its share
/// stand side by side.
pub fn print_heaps(n: usize, owned: &[f64], profiles: &[Option<heap::Profile>]) {
    const SHOWN: usize = 16;
    let profiles: Vec<&heap::Profile> = profiles.iter().flatten().collect();
    let mut sites: Vec<&str> = Vec::new();
    for profile in &profiles {
        for (site, _) in profile.by_site.iter().take(SHOWN) {
            if !sites.contains(&site.as_str()) {
                sites.push(site);
            }
        }
    }
    let kib = |bytes: u64| format!("{:.0}", bytes as f64 / 1024.0);
    let columns: Vec<String> = (1..=profiles.len())
        .map(|k| format!("replica-{k}"))
        .collect();
    println!(
        "\nlive heap of each replica at rest, {n} replica(s) (dhat; KiB, by the host's innermost \
         frame on the allocating stack):\n"
    );
    println!("| | {} |", columns.join(" | "));
    println!("|---|{}", "---|".repeat(columns.len()));
    let owned: Vec<String> = owned.iter().map(|o| format!("{o:.0}")).collect();
    println!("| parents owned | {} |", owned.join(" | "));
    let row = |name: &str, cell: &dyn Fn(&heap::Profile) -> String| {
        let cells: Vec<String> = profiles.iter().map(|p| cell(p)).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("all live bytes", &|p| kib(p.total.bytes));
    row("blocks", &|p| p.total.blocks.to_string());
    for site in &sites {
        row(&format!("`{site}`"), &|p| {
            let live = p.by_site.iter().find(|(s, _)| s == site);
            live.map_or("0".into(), |(_, l)| kib(l.bytes))
        });
    }
}
