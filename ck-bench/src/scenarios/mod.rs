//! The scenarios, one file each (and the helpers several of them share: [`three_loads`],
//! [`fleet`] and [`peers`], [`minimal_program`], [`grid`]).

pub mod bpf_cost;
pub mod canary;
pub mod canary_withdraw;
pub mod chaos;
pub mod conn_count;
pub mod cork;
pub mod dns;
pub mod first_moment;
pub mod fleet;
pub mod footprint;
pub mod grid;
pub mod latency;
pub mod long_lived;
pub mod minimal_program;
pub mod overhead;
pub mod peer_loads;
pub mod peers;
pub mod quic;
pub mod quic_stacks;
pub mod ready_slow;
pub mod recovery;
pub mod recovery_node;
pub mod reload;
pub mod rollback;
pub mod slow_start;
pub mod spread;
pub mod stall;
pub mod sticky;
pub mod supervisor_cpu;
pub mod survive;
pub mod three_loads;
pub mod udp_cost;
pub mod udp_rate;
pub mod upgrade;
