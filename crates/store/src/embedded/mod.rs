//! The embedded implementations: everything in one process, no external
//! service. `labios serve` runs these and exposes them through `remote`.

mod memory_queue;
mod memory_warehouse;
mod redb_inventory;

pub use memory_queue::MemoryQueue;
pub use memory_warehouse::MemoryWarehouse;
pub use redb_inventory::{InventoryConfig, RedbInventory};
