//! Boot priority's decision (`--boot-boost`): while a replacement of a worker that died boots,
//! every other worker steps back; once none boots, they come back.

/// A worker as boot priority sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booting {
    /// Its slot.
    pub index: u32,
    /// A replacement of a worker that died, still starting.
    pub replacement_starting: bool,
    /// ck stepped it back.
    pub stepped_back: bool,
}

/// What boot priority changes now.
#[derive(Debug, PartialEq, Eq)]
pub struct Priority {
    /// Whether the workers that change step back (else they come back).
    pub back: bool,
    /// The replacements booting.
    pub booting: Vec<u32>,
    /// The workers whose priority changes.
    pub changing: Vec<u32>,
}

/// The change boot priority makes for `workers` (`boost`: `--boot-boost`, 0 when off); None
/// when nothing changes.
pub fn decide(workers: &[Booting], boost: u8) -> Option<Priority> {
    let booting: Vec<u32> = workers
        .iter()
        .filter(|w| w.replacement_starting)
        .map(|w| w.index)
        .collect();
    let back = !booting.is_empty() && boost != 0;
    let changing: Vec<u32> = workers
        .iter()
        .filter(|w| !w.replacement_starting && w.stepped_back != back)
        .map(|w| w.index)
        .collect();
    (!changing.is_empty()).then_some(Priority {
        back,
        booting,
        changing,
    })
}
