//! What the benchmark prints: a line per run as it ends, then the medians over rounds beside
//! each other, the writes of both by form, whether they left the same managed fields, and the
//! verdict against the target.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{Figures, Settings, TARGET, Variant};

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// One line per run, as it ends.
pub fn run(round: usize, f: &Figures, parents: usize) {
    let n = parents as f64;
    let (first, last) = f.writes.window.unwrap_or_default();
    println!(
        "round {round} {:<24} created {:>5.1} s ({:>4.0}/s)  ready {:>4}  writes {:.2}/parent \
         ({} refused), first {first:.2} s, last {last:.1} s  timed {:>5.1} s = {:>5.1} parents/s  \
         converged {:>5.1} s  reconciles {:>5}  CPU bench {:.1} s, host {:.1} s, control plane \
         {:.1} s, other processes {:.1} s",
        f.variant.label(),
        secs(f.create),
        n / secs(f.create),
        f.ready.map_or("-".into(), |r| format!("{:.1} s", secs(r))),
        f.writes.total() as f64 / n,
        f.writes.refused,
        secs(f.done),
        f.rate(parents),
        secs(f.seen),
        f.reconciles
            .map_or("-".into(), |r| format!("{:.2}/p", r / n)),
        secs(f.cpu.bench),
        secs(f.cpu.host),
        secs(f.cpu.plane),
        secs(f.cpu.others()),
    );
    let served: Vec<String> = f
        .served
        .per_parent(parents, 0.01)
        .iter()
        .map(|(what, n)| format!("{what} {n:.2}"))
        .collect();
    println!(
        "        the API server served, per parent, while timed: {}",
        served.join(", ")
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The medians, the writes by form, the managed-fields check and the verdict.
pub fn medians(
    all: &[Figures],
    fields: &[(Vec<String>, Vec<String>)],
    s: &Settings,
    rounds: usize,
) {
    let n = s.parents as f64;
    let of = |v: Variant, get: &dyn Fn(&Figures) -> f64| {
        median(all.iter().filter(|f| f.variant == v).map(get).collect())
    };
    type Column<'a> = &'a dyn Fn(&Figures) -> f64;
    let window = |f: &Figures| f.writes.window.unwrap_or_default();
    let rows: [(&str, Column); 16] = [
        ("parents created, before the clock (s)", &|f| secs(f.create)),
        ("creation rate (parents/s)", &|f| n / secs(f.create)),
        ("host ready after its start (s)", &|f| {
            f.ready.map_or(f64::NAN, secs)
        }),
        ("first write after the clock's start (s)", &|f| window(f).0),
        ("last write after the clock's start (s)", &|f| window(f).1),
        ("writes per second, first to last", &|f| {
            let (a, b) = window(f);
            f.writes.total() as f64 / (b - a)
        }),
        ("timed: writes returned / converged (s)", &|f| secs(f.done)),
        ("**parents per second**", &|f| f.rate(s.parents)),
        ("writes per parent", &|f| f.writes.total() as f64 / n),
        ("host reconciles per parent", &|f| {
            f.reconciles.map_or(f64::NAN, |r| r / n)
        }),
        ("CPU, benchmark process (s)", &|f| secs(f.cpu.bench)),
        ("CPU, host (s)", &|f| secs(f.cpu.host)),
        ("CPU, control plane (s)", &|f| secs(f.cpu.plane)),
        ("control plane, cores busy while timed", &|f| {
            secs(f.cpu.plane) / secs(f.seen)
        }),
        ("CPU, other processes on the machine (s)", &|f| {
            secs(f.cpu.others())
        }),
        ("whole machine, cores busy while timed", &|f| {
            secs(f.cpu.machine) / secs(f.seen)
        }),
    ];
    println!("\nmedians over {rounds} rounds, {} parents:\n", s.parents);
    println!(
        "| | {} | {} | host / raw |",
        Variant::Raw.label(),
        Variant::Host.label()
    );
    println!("|---|---|---|---|");
    for (name, get) in rows {
        let (r, h) = (of(Variant::Raw, get), of(Variant::Host, get));
        let ratio = if r.is_finite() && h.is_finite() && r != 0.0 {
            format!("{:.3}", h / r)
        } else {
            "-".into()
        };
        let cell = |v: f64| {
            if v.is_finite() {
                format!("{v:.2}")
            } else {
                "-".into()
            }
        };
        println!("| {name} | {} | {} | {ratio} |", cell(r), cell(h));
    }

    println!("\nwrites per parent by form (last round):\n");
    println!(
        "| request | {} | {} |",
        Variant::Raw.label(),
        Variant::Host.label()
    );
    println!("|---|---|---|");
    let last = |v: Variant| {
        all.iter()
            .rev()
            .find(|f| f.variant == v)
            .map(|f| &f.writes.forms)
    };
    let (raw, host) = (last(Variant::Raw).unwrap(), last(Variant::Host).unwrap());
    let forms: BTreeSet<&String> = raw.keys().chain(host.keys()).collect();
    for form in forms {
        let per = |m: &BTreeMap<String, usize>| m.get(form).map_or(0.0, |c| *c as f64 / n);
        println!("| `{form}` | {:.2} | {:.2} |", per(raw), per(host));
    }

    let differ = fields.iter().filter(|(r, h)| r != h).count();
    if differ == 0 {
        println!(
            "\nmanaged fields on app-00000, its Deployment and Service: the same from both \
             writers in every round ({} entries)",
            fields.first().map_or(0, |(r, _)| r.len())
        );
    } else {
        println!("\nmanaged fields differ in {differ} of {rounds} rounds (raw, then host):");
        let (r, h) = fields.iter().find(|(r, h)| r != h).unwrap();
        for line in r.iter().filter(|l| !h.contains(l)) {
            println!("- raw only:  {line}");
        }
        for line in h.iter().filter(|l| !r.contains(l)) {
            println!("- host only: {line}");
        }
    }

    let raw_rate = of(Variant::Raw, &|f| f.rate(s.parents));
    let host_rate = of(Variant::Host, &|f| f.rate(s.parents));
    let creation = median(all.iter().map(|f| n / secs(f.create)).collect());
    let share = host_rate / raw_rate;
    // Each round's own ratio too: the two runs of a round are minutes apart, where the medians
    // of each writer over all rounds may come from different moments of a noisy machine.
    let paired: Vec<f64> = all
        .chunks(2)
        .filter_map(|pair| {
            let rate = |v: Variant| {
                pair.iter()
                    .find(|f| f.variant == v)
                    .map(|f| f.rate(s.parents))
            };
            Some(rate(Variant::Host)? / rate(Variant::Raw)?)
        })
        .collect();
    println!(
        "\nhost / raw within each round: {} (median {:.3})",
        paired
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", "),
        median(paired.clone())
    );
    println!("\nTargets:");
    println!(
        "- the host converges {n} parents at {host_rate:.1} parents/s, the raw generator makes \
         the same writes at {raw_rate:.1} parents/s: {share:.3} of the raw rate against >= \
         {TARGET}: {}",
        if share >= TARGET {
            "met".to_owned()
        } else {
            format!("missed by {:.2}x", TARGET / share)
        }
    );
    println!(
        "- parent creation ({} at a time) runs at {creation:.0} parents/s, {:.1}x the raw rate, \
         and ends before either clock starts: not the bottleneck",
        s.creators,
        creation / raw_rate
    );
}
