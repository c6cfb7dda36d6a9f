//! The distributed deployment's stores (ARCHITECTURE.md "Deployments" 2): label
//! queues on NATS JetStream, warehouse and inventory on Redis. Existing,
//! trusted engines; LABIOS only maps its three traits onto them.

pub mod nats_queue;
pub mod redis_store;
