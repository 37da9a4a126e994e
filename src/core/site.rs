//! A site's index: what the engine and per-application pacing both key their per-site
//! state by. Apart from both, so that neither imports the other for it.

/// Index of a site in the engine's site list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SiteIdx(pub u32);
