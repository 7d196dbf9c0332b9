//! A trial's kills, drawn before it starts: each a victim and an instant.

use super::{ChaosArgs, Instant, Restart, Victim};

/// A small deterministic generator (xorshift64*).
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// A uniform draw in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform draw in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.unit() * n as f64) as usize).min(n.saturating_sub(1))
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// One kill of a trial.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Kill {
    /// Whom it strikes.
    pub victim: Victim,
    /// When.
    pub instant: Instant,
    /// For [`Instant::Any`]: the fraction of the failure-free run at which
    /// it strikes, after the launch.
    pub at: f64,
    /// For [`Instant::Rollback`]: 0 as the first rank unwinds (the others
    /// have not reached their entry point), 1 once every rank unwound
    /// (they are meeting), 2 as the first rank resumes after the meeting.
    pub stage: u8,
    /// For a node: which one (its index among the simulated nodes).
    pub node: u32,
}

/// The kills of one trial and the replacements they need.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    /// In the order they strike.
    pub kills: Vec<Kill>,
    /// Processes of working ranks they end: the replacements the job is
    /// given (the launcher's respawn, or as many spares, plus the spares
    /// they kill).
    pub deaths: u32,
    /// Spares they kill.
    pub spares_killed: u32,
}

impl Plan {
    /// The spares the job needs: one per death and per spare killed.
    pub fn spares(&self) -> u32 {
        self.deaths + self.spares_killed
    }
}

/// The victims and instants that apply to a job of `args` under `restart`.
fn applicable(args: &ChaosArgs, restart: Restart) -> (Vec<Victim>, Vec<Instant>) {
    let victims = args
        .victims
        .iter()
        .copied()
        .filter(|v| match v {
            Victim::Node => args.sim_nodes.is_some(),
            Victim::Spare => args.with_spares(),
            _ => true,
        })
        .collect();
    let instants = args
        .instants
        .iter()
        .copied()
        .filter(|i| *i != Instant::Rollback || restart == Restart::Global)
        .collect();
    (victims, instants)
}

/// Ranks on the biggest simulated node (the most a node's death costs).
fn per_node(args: &ChaosArgs) -> u32 {
    args.sim_nodes.map_or(1, |n| args.np.div_ceil(n))
}

/// Draws the `k` kills of one trial.
pub fn draw(args: &ChaosArgs, restart: Restart, k: u32, rng: &mut Rng) -> Plan {
    let (victims, instants) = applicable(args, restart);
    let mut kills = Vec::with_capacity(k as usize);
    let (mut deaths, mut spares_killed) = (0, 0);
    for n in 0..k {
        // The first kill strikes a job with no replacement yet: a
        // replacement's instants and victim need one before.
        let victim = loop {
            let v = rng.pick(&victims);
            if n > 0 || v != Victim::Replacement || victims.len() == 1 {
                break v;
            }
        };
        let instant = match n {
            0 => Instant::Any,
            _ => rng.pick(&instants),
        };
        let victim = match (victim, n) {
            (Victim::Replacement, 0) => Victim::Worker,
            (v, _) => v,
        };
        match victim {
            Victim::Spare => spares_killed += 1,
            Victim::Node => deaths += per_node(args),
            _ => deaths += 1,
        }
        kills.push(Kill {
            victim,
            instant,
            at: rng.unit(),
            stage: rng.below(3) as u8,
            node: args
                .sim_nodes
                .map_or(0, |nodes| rng.below(nodes as usize) as u32),
        });
    }
    // Kills at any instant strike in the order of their instants, each
    // after the one before: sorted among themselves.
    let mut ats: Vec<f64> = kills.iter().map(|k| k.at).collect();
    ats.sort_by(f64::total_cmp);
    for (kill, at) in kills.iter_mut().zip(ats) {
        kill.at = at;
    }
    Plan {
        kills,
        deaths,
        spares_killed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ChaosArgs,
    }

    fn args(extra: &[&str]) -> ChaosArgs {
        let mut argv = vec!["chaos"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).args
    }

    #[test]
    fn a_plan_stays_within_what_the_job_offers() {
        let a = args(&["--kills", "3"]);
        let mut rng = Rng::new(7);
        for _ in 0..500 {
            let p = draw(&a, Restart::Local, 3, &mut rng);
            assert_eq!(p.kills.len(), 3);
            assert_ne!(p.kills[0].victim, Victim::Replacement);
            assert_eq!(p.kills[0].instant, Instant::Any);
            assert!(p.kills.iter().all(|k| k.instant != Instant::Rollback));
            assert!(p
                .kills
                .iter()
                .all(|k| !matches!(k.victim, Victim::Node | Victim::Spare)));
            assert_eq!(p.deaths, 3);
            assert!(p.kills.windows(2).all(|w| w[0].at <= w[1].at));
        }
    }

    #[test]
    fn nodes_and_spares_are_drawn_when_the_job_has_them() {
        let a = args(&["--sim-nodes", "3", "--spares", "--np", "6"]);
        let mut rng = Rng::new(3);
        let plans: Vec<Plan> = (0..300)
            .map(|_| draw(&a, Restart::Global, 2, &mut rng))
            .collect();
        let seen = |v: Victim| plans.iter().any(|p| p.kills.iter().any(|k| k.victim == v));
        assert!(seen(Victim::Node) && seen(Victim::Spare) && seen(Victim::Master));
        let rollback = plans
            .iter()
            .any(|p| p.kills.iter().any(|k| k.instant == Instant::Rollback));
        assert!(rollback);
        for p in &plans {
            let nodes = p.kills.iter().filter(|k| k.victim == Victim::Node).count() as u32;
            let spares = p.kills.iter().filter(|k| k.victim == Victim::Spare).count() as u32;
            assert_eq!(p.deaths, nodes * 2 + (2 - nodes - spares));
            assert_eq!(p.spares(), p.deaths + spares);
        }
    }
}
