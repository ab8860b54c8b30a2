//! What `least-conn` compares. Kernel: the program sums each candidate's per-CPU open-connection
//! counts itself (`bpf_map_lookup_percpu_elem`, Linux >= 5.19), exact at every connection.
//! Sampled: the supervisor writes the same kernel counts to `conn_samples` every
//! `--sample-interval` while traffic flows, where the kernel refuses the summing program (Linux
//! 5.14 to 5.18) or `CK_LEAST_CONN=sampled` ([`FORCE_ENV`]) forces it. Round-robin: where the
//! kernel does not count connections at all (no BTF, or `CK_CONN_COUNT=scan`), nothing cheap
//! enough to steer by is known, and every candidate ties.

/// The environment variable that forces sampled counts (`sampled`; unset: the kernel's where it
/// allows it).
pub const FORCE_ENV: &str = "CK_LEAST_CONN";

/// What `least-conn` steers by, as the loaded program was set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnSteering {
    /// The program sums the kernel's counts.
    Kernel,
    /// The supervisor's samples of the kernel's counts, and why.
    Sampled(String),
    /// No counts: round-robin, and why.
    RoundRobin(String),
}

impl ConnSteering {
    /// The words `ck status` shows: `kernel (BPF)`, `sampled (why)` or `round-robin (why)`.
    pub fn describe(&self) -> String {
        match self {
            ConnSteering::Kernel => "kernel (BPF)".into(),
            ConnSteering::Sampled(why) => format!("sampled ({why})"),
            ConnSteering::RoundRobin(why) => format!("round-robin ({why})"),
        }
    }
}

/// Why the summing program must not be tried, when [`FORCE_ENV`] says so; an unknown value is
/// refused with the fix.
pub fn forced() -> Result<Option<String>, String> {
    match std::env::var(FORCE_ENV).ok().as_deref().map(str::trim) {
        None | Some("" | "kernel") => Ok(None),
        Some("sampled") => Ok(Some(format!("forced by {FORCE_ENV}=sampled"))),
        Some(other) => Err(format!(
            "{FORCE_ENV}={other} is neither `kernel` nor `sampled`; unset it for the kernel's counts"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_say_what_and_why() {
        assert_eq!(ConnSteering::Kernel.describe(), "kernel (BPF)");
        assert_eq!(
            ConnSteering::Sampled("Linux < 5.19".into()).describe(),
            "sampled (Linux < 5.19)"
        );
        assert_eq!(
            ConnSteering::RoundRobin("no BTF".into()).describe(),
            "round-robin (no BTF)"
        );
    }
}
