//! The collections of the per-message path.

/// The hash map of the per-message path (topic words, subscription and
/// delivery ids, queue names): foldhash instead of SipHash, several times
/// faster on such short keys, and still seeded at random so that clients
/// cannot pick names that collide.
pub type FastMap<K, V> = foldhash::HashMap<K, V>;

/// The hash set of the per-message path, hashed as [`FastMap`].
pub type FastSet<K> = foldhash::HashSet<K>;
