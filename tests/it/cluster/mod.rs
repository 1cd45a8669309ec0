//! Replicas sharing Redis: ownership and takeover, faults, fencing, the signed hop, limits across
//! replicas, balancers (round-robin and owner-aware), chaos, and the shipped Compose and
//! Kubernetes deployments.

mod balancers;
mod chaos;
mod compose;
mod fencing;
mod hop_signature;
mod hop_tls;
mod http_sessions_survive;
mod kubernetes;
mod one_stream_hop;
mod owner_routing;
mod redis_cluster;
mod replica_faults;
mod replicas;
mod sentinel_failover;
mod sessions_per_principal;
mod store_access;
mod virtual_takeover;
mod write_behind;
