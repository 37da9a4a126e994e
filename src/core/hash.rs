//! Hash maps of the core, with a fixed seed: lookups as fast as foldhash makes them,
//! and any iteration in the same order on every run, so that the simulator and the
//! tests are reproducible. The core uses these instead of std's randomly seeded ones
//! (`src/core_purity.rs` checks that).

/// The hasher of every map in the core.
pub type FixedHasher = foldhash::fast::FixedState;
/// A `HashMap` with [`FixedHasher`].
pub type FixedMap<K, V> = std::collections::HashMap<K, V, FixedHasher>;
/// A `HashSet` with [`FixedHasher`].
pub type FixedSet<T> = std::collections::HashSet<T, FixedHasher>;
