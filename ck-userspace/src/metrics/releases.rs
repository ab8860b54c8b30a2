//! The `/metrics` families of releases: canary verdicts, the share of the canary judged now,
//! and the kernel's counts a canary is judged by (resets sent, connections dropped by a full
//! accept queue), per group and slot.
use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::families::{Exposition, Family, counter, gauge};

const CANARIES: Family = counter(
    "ck_canaries",
    "Canary rolls (ck reload --canary) judged to the end, by verdict: promoted into the roll, or \
     withdrawn (a worker failed, or a --canary-max-* limit was crossed)",
    None,
);
const CANARY_SHARE: Family = gauge(
    "ck_canary_share",
    "Share of new connections of the canary judged now, 0 to 1, as the program's maps give it \
     (0: none judged)",
    None,
);
const RESETS: Family = counter(
    "ck_connections_reset_sent",
    "Resets the slot's connections sent: connections its own side aborted (closed with data \
     unread or SO_LINGER 0, or left by a worker that exited), counted by the kernel",
    None,
);
const LISTEN_DROPS: Family = counter(
    "ck_listen_drops",
    "Connections the slot's listening socket dropped, mostly for a full accept queue \
     (SO_MEMINFO drops, ss -tlm's d); a SYN sent again counts again",
    None,
);

impl Exposition {
    pub(super) fn encode_releases(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let c = self.scrape.canaries;
        CANARIES.encode(
            encoder,
            [
                (vec![("verdict", "promoted".to_string())], c.promoted),
                (vec![("verdict", "withdrawn".to_string())], c.withdrawn),
            ],
        )?;
        CANARY_SHARE.encode_one(encoder, c.share.unwrap_or(0.0))?;
        RESETS.encode(encoder, self.per_group_slot(|s| s.resets))?;
        LISTEN_DROPS.encode(encoder, self.per_group_slot(|s| s.listen_drops))
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::{CanaryCounts, GroupScrape, GroupSlot, Scrape, families::Exposition};

    /// Verdicts are a counter by label, the share a gauge, the kernel's counts per group and
    /// slot (none where not counted).
    #[test]
    fn encodes_the_canary_families() {
        let scrape = Scrape {
            canaries: CanaryCounts {
                promoted: 2,
                withdrawn: 1,
                share: Some(0.25),
            },
            groups: vec![GroupScrape {
                name: "tcp4-8080".into(),
                slots: vec![
                    GroupSlot {
                        slot: 4,
                        resets: Some(9),
                        listen_drops: Some(3),
                        ..Default::default()
                    },
                    GroupSlot {
                        slot: 5,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = Exposition {
            scrape,
            connections: Default::default(),
            process: None,
        }
        .encode();
        for line in [
            "ck_canaries_total{verdict=\"promoted\"} 2\n",
            "ck_canaries_total{verdict=\"withdrawn\"} 1\n",
            "ck_canary_share 0.25\n",
            "ck_connections_reset_sent_total{group=\"tcp4-8080\",slot=\"4\"} 9\n",
            "ck_listen_drops_total{group=\"tcp4-8080\",slot=\"4\"} 3\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("slot=\"5\"} "), "{text}");
    }
}
