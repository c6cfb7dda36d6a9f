//! Warehouse and inventory on Redis.
