//! A model of each strategy's start-up time, and link estimation, for `--strategy auto`.
//!
//! In the spirit of the paper's Eq. 1 (start-up = bytes used / bandwidth + latencies + local
//! start-up), each strategy's time is predicted from what it must move before or during
//! start-up, as the engine does it:
//!
//! - `original`: every object (the hot part, each cold object) with a piece not cached, whole,
//!   one request at a time: `object bytes / bw + objects x latency + local`.
//! - `paged`: every hot chunk not cached is a demand miss. Misses of one kernel read go out
//!   in parallel (up to the read-ahead's chunks and the connections), reads are sequential:
//!   `hot bytes / bw + ceil(hot misses / batch) x latency + local`.
//! - `reordered`: one request for the hot part from its first to its last missing chunk,
//!   before start: `span / bw + latency + local`.
//! - `reordered-paged` and `stream`: the same request starts with the program, which runs
//!   while the hot set arrives, reading it in the order it arrives: `max(latency + span / bw,
//!   local)`. The engine starts `stream`'s background work only after the hot set, so up to
//!   the end of the hot set the two are the same.
//!
//! The manifest, for a mount that has yet to read it ([`Shape::manifest`], what `coldstart
//! predict` predicts): `original` and `paged` read it first (`manifest.json.zst`: one latency
//! and its bytes); the hot-set strategies read it with the hot set in one request, the start
//! object, so it adds its bytes but no latency, and the hot part is the hot part from its
//! start to its last chunk not cached. Under `--strategy auto` the manifest has been read
//! before the prediction, and the hot set is a request of its own.
//!
//! Reads outside the hot set ([`Shape::held_out`]): a workload the hot set was not recorded
//! from waits one round trip per such read, one read after the other, under every strategy but
//! `original`. How many there will be is not in the bundle; the mount's history of earlier
//! starts of the bundle says how many they made ([`crate::history`]: the median, per
//! strategy), and the model adds `misses x latency + bytes / bw` to `paged`, `misses x
//! latency + other bytes / bw` to `reordered` (the other bytes: all but the manifest's and the
//! hot request's, so also what misses brought ahead), and `reordered-paged` and `stream`,
//! whose waits overlap the hot transfer while the other bytes share its link, take
//! `max(hot + other bytes / bw, local + misses x latency + bytes / bw)`. Without history it
//! counts none.
//!
//! The kernel's read-ahead ([`Params::readahead`], what the mount is given): where it is larger
//! than a page, a program's read of a hot piece also asks for the chunks around it
//! ([`Shape::ahead`], `crate::readahead`), which are fetched on demand while the read waits:
//! one round trip per such read and their bytes, counted as misses outside the hot set are
//! (the larger of the two, where the history has those: its starts made the same reads); for
//! `paged`, whose hot chunks are misses anyway, their bytes only. Where every chunk is a miss
//! (`paged`, a bundle without a hot set) a larger read-ahead asks for more chunks in one
//! read, which go out in parallel: fewer round trips.
//!
//! What the model ignores: connection set-up; the program's own think time interleaved with `paged`'s misses (counted once, in
//! `local`); compression's decoding time. Bytes are the bytes on the wire (compressed sizes
//! for a compressed bundle).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use coldstart_bundle::start::START_OBJECT;
use coldstart_bundle::{FetchError, Manifest, Remote, Sha256Hex, Span};
use serde::Serialize;

use crate::history::HeldOut;
use crate::strategy::{whole_objects, Strategy};

/// What the model needs from a bundle and the local chunk cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Shape {
    /// Bytes and count of the objects `original` would download whole (the start object's hot
    /// part and the cold objects, each with a piece not cached).
    pub file_bytes: u64,
    /// How many such objects.
    pub files: u64,
    /// Bytes and count of hot chunks not cached (demand misses of `paged`).
    pub hot_miss_bytes: u64,
    /// How many hot chunks are not cached.
    pub hot_misses: u64,
    /// Bytes of the hot part from the first to the last chunk not cached (the hot request).
    pub hot_span_bytes: u64,
    /// The chunk size the bundle was packed with.
    pub chunk_size: u64,
    /// Whether the bundle has a hot set. Without one the model assumes start-up reads every
    /// chunk not cached (`all_misses`), each strategy but `original` fetching it on demand.
    pub has_hot_set: bool,
    /// Bytes and count of all chunks not cached.
    pub all_miss_bytes: u64,
    /// How many chunks are not cached.
    pub all_misses: u64,
    /// Bytes of the hot part from its start to the end of the last chunk not cached (what the
    /// start object sends after the manifest).
    pub hot_prefix_bytes: u64,
    /// The manifest, if the mount has yet to read it.
    pub manifest: Option<ManifestCost>,
    /// Per strategy, the reads outside the hot set to expect (from earlier mounts of the
    /// bundle, [`crate::history`]); a strategy not listed is predicted with none.
    pub held_out: Vec<HeldOut>,
    /// What the mount's read-ahead asks for beyond the hot set (none with a page of it).
    pub ahead: ReadAhead,
}

/// The kernel reads that ask for chunks outside the hot set because of the read-ahead around
/// the hot pieces, and those chunks (not cached): fetched on demand while the read waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReadAhead {
    /// Those kernel reads.
    pub reads: u64,
    /// The chunks they ask for.
    pub chunks: u64,
    /// Their bytes on the wire.
    pub bytes: u64,
}

/// What reading the manifest costs a mount that has not read it yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ManifestCost {
    /// Its bytes on the wire (`manifest.json.zst`, or `manifest.json` for an older bundle).
    pub bytes: u64,
    /// Whether the bundle has a start object: the hot-set strategies then read the manifest
    /// and the hot set in one request.
    pub start_object: bool,
    /// Bytes of the start object's hot part already received with the manifest (a link
    /// sample): paid by every strategy, no longer to come for the hot-set strategies.
    pub hot_received: u64,
}

impl Shape {
    /// The shape of `manifest` given which chunks are cached.
    pub fn of(manifest: &Manifest, cached: impl Fn(&Sha256Hex) -> bool) -> Shape {
        let mut s = Shape {
            chunk_size: manifest.chunk_size.max(1),
            has_hot_set: !manifest.hot.chunks.is_empty(),
            ..Shape::default()
        };
        let mut chunks = HashSet::new();
        for c in manifest.files.iter().flat_map(|e| &e.chunks) {
            if !cached(&c.sha256) && chunks.insert(&c.sha256) {
                s.all_misses += 1;
                s.all_miss_bytes += c.stored_len();
            }
        }
        for (_, pieces) in whole_objects(manifest, &cached) {
            s.files += 1;
            s.file_bytes += pieces.iter().map(|c| c.stored_len()).sum::<u64>();
        }
        let hot = manifest.hot_chunks();
        let missing: Vec<usize> = (0..hot.len()).filter(|&i| !cached(&hot[i].1.sha256)).collect();
        let mut counted = HashSet::new();
        for &i in &missing {
            if counted.insert(&hot[i].1.sha256) {
                s.hot_misses += 1;
                s.hot_miss_bytes += hot[i].1.stored_len();
            }
        }
        if let (Some(&a), Some(&b)) = (missing.first(), missing.last()) {
            s.hot_span_bytes = hot[b].0 + hot[b].1.stored_len() - hot[a].0;
            s.hot_prefix_bytes = hot[b].0 + hot[b].1.stored_len();
        }
        s
    }
}

/// A link as the model sees it, with where each figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkEstimate {
    /// Bytes per second.
    pub bytes_per_second: f64,
    /// Added once per request (the time to the first byte of a small request).
    pub latency_ms: f64,
    /// Whether the bandwidth was measured (`false`: given by the user).
    pub bandwidth_estimated: bool,
    /// Whether the latency was measured (`false`: given by the user).
    pub latency_estimated: bool,
}

impl LinkEstimate {
    /// A link given by the user.
    pub fn given(bits_per_second: f64, latency: Duration) -> LinkEstimate {
        LinkEstimate {
            bytes_per_second: bits_per_second / 8.0,
            latency_ms: latency.as_secs_f64() * 1e3,
            bandwidth_estimated: false,
            latency_estimated: false,
        }
    }

    /// A link measured: `bytes_per_second`, and `latency` seconds per request.
    pub(crate) fn measured(bytes_per_second: f64, latency: f64) -> LinkEstimate {
        LinkEstimate {
            bytes_per_second,
            latency_ms: latency * 1e3,
            bandwidth_estimated: true,
            latency_estimated: true,
        }
    }

    fn latency(&self) -> f64 {
        self.latency_ms / 1e3
    }

    fn transfer(&self, bytes: u64) -> f64 {
        self.transfer_f(bytes as f64)
    }

    fn transfer_f(&self, bytes: f64) -> f64 {
        bytes / self.bytes_per_second
    }
}

/// The engine's settings that change the prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Requests in flight at most.
    pub connections: usize,
    /// The kernel's read-ahead in bytes (how many chunks one read asks for).
    pub readahead: u32,
    /// The program's start-up time with every byte local, if known.
    pub local: Option<Duration>,
}

/// One strategy's predicted start-up time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// The strategy.
    pub strategy: Strategy,
    /// Its predicted start-up, in milliseconds.
    pub ms: f64,
}

/// Strategies in the order ties are broken: `reordered-paged` first (it measured best or
/// within noise of the best among the hot-set strategies on the paper's links), then
/// `stream`, whose gain, bringing what the hot set missed, is outside the model, then the
/// strategies that wait for more before start, `original` last.
const PREFERENCE: [Strategy; 5] = [
    Strategy::ReorderedPaged,
    Strategy::Stream,
    Strategy::Reordered,
    Strategy::Paged,
    Strategy::Original,
];

/// Every strategy's predicted start-up time, in [`Strategy::ALL`] order.
pub fn predict(shape: &Shape, link: &LinkEstimate, p: &Params) -> Vec<Prediction> {
    let lat = link.latency();
    let local = p.local.map_or(0.0, |d| d.as_secs_f64());
    let per_read = (p.readahead as u64).div_ceil(shape.chunk_size).max(1) as usize;
    let batch = per_read.min(p.connections.max(1)) as u64;
    let span =
        if shape.hot_span_bytes > 0 { link.transfer(shape.hot_span_bytes) + lat } else { 0.0 };
    let demand =
        |bytes: u64, misses: u64| link.transfer(bytes) + misses.div_ceil(batch) as f64 * lat;
    // The manifest's request, for `original` and `paged`; for the hot-set strategies, the
    // start object's manifest part (its latency is the hot set's) and its hot part.
    let (manifest, start) = match shape.manifest {
        None => (0.0, None),
        Some(m) if m.start_object => {
            let head = coldstart_bundle::start::HEADER_LEN as u64;
            let paid = m.bytes + m.hot_received;
            (link.transfer(paid) + lat, Some((link.transfer(paid + head) + lat, m.hot_received)))
        }
        Some(m) => (link.transfer(m.bytes) + lat, None),
    };
    let (before_hot, hot) = match start {
        Some((first, got)) => (first, link.transfer(shape.hot_prefix_bytes.saturating_sub(got))),
        None => (manifest, span),
    };
    let no_hot = demand(shape.all_miss_bytes, shape.all_misses) + local;
    // Of a strategy's reads outside the hot set: their round trips, their transfer, and the
    // transfer of every byte but the manifest's and the hot request's (theirs, what they
    // brought ahead, hot chunks fetched on their own, background work). The read-ahead's
    // beyond the hot set, where the history counts fewer (`paged` waits for them in its hot
    // misses' reads: their bytes only).
    let held_parts = |s: Strategy| {
        let history =
            shape.held_out.iter().find(|h| h.strategy == s).map_or((0.0, 0.0, 0.0), |h| {
                (
                    h.misses * lat,
                    link.transfer_f(h.bytes),
                    link.transfer_f(h.other_bytes.max(h.bytes)),
                )
            });
        let trips = if s == Strategy::Paged { 0.0 } else { shape.ahead.reads as f64 * lat };
        let bytes = link.transfer(shape.ahead.bytes);
        (history.0.max(trips), history.1.max(bytes), history.2.max(bytes))
    };
    let held = |s: Strategy| {
        let (trips, bytes, _) = held_parts(s);
        trips + bytes
    };
    Strategy::ALL
        .iter()
        .map(|&strategy| {
            let secs = match strategy {
                Strategy::Original => {
                    manifest + link.transfer(shape.file_bytes) + shape.files as f64 * lat + local
                }
                Strategy::Paged => {
                    manifest
                        + if shape.has_hot_set {
                            demand(shape.hot_miss_bytes, shape.hot_misses) + held(strategy) + local
                        } else {
                            no_hot
                        }
                }
                _ if !shape.has_hot_set => before_hot + no_hot,
                Strategy::Reordered => {
                    let (trips, _, other) = held_parts(strategy);
                    before_hot + hot + trips + other + local
                }
                // The program runs while the hot set arrives: its waits outside the hot set
                // overlap the hot transfer, whose link the other bytes share.
                Strategy::ReorderedPaged | Strategy::Stream => {
                    before_hot + (hot + held_parts(strategy).2).max(local + held(strategy))
                }
            };
            Prediction { strategy, ms: secs * 1e3 }
        })
        .collect()
}

/// The fastest predicted strategy; ties (within 1%) go to `reordered-paged`, then `stream`,
/// `reordered`, `paged`, `original`.
pub fn choose(predictions: &[Prediction]) -> Strategy {
    let best = predictions.iter().map(|p| p.ms).fold(f64::INFINITY, f64::min);
    let near =
        |s: Strategy| predictions.iter().any(|p| p.strategy == s && p.ms <= best * 1.01 + 1e-9);
    PREFERENCE.into_iter().find(|&s| near(s)).unwrap_or(Strategy::ReorderedPaged)
}

/// What `--strategy auto` decided, for the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// The strategy chosen.
    pub chosen: Strategy,
    /// The link it was chosen for.
    pub link: LinkEstimate,
    /// Each strategy's predicted start-up.
    pub predictions: Vec<Prediction>,
    /// The misses outside the hot set counted, per strategy (from earlier mounts of the
    /// bundle); empty: none counted.
    pub held_out: Vec<HeldOut>,
    /// What the read-ahead asks for beyond the hot set, counted.
    pub ahead: ReadAhead,
}

impl Choice {
    /// One line: the choice, the link and every prediction.
    pub fn summary(&self) -> String {
        let l = &self.link;
        let preds: Vec<String> =
            self.predictions.iter().map(|p| format!("{} {:.0} ms", p.strategy, p.ms)).collect();
        format!(
            "auto chose {} (link {:.2} Mbit/s {}, latency {:.1} ms {}; predicted {}; {})",
            self.chosen,
            l.bytes_per_second * 8.0 / 1e6,
            if l.bandwidth_estimated { "estimated" } else { "given" },
            l.latency_ms,
            if l.latency_estimated { "estimated" } else { "given" },
            preds.join(", "),
            self.held_out_summary()
        )
    }

    /// The misses outside the hot set counted, in words.
    pub fn held_out_summary(&self) -> String {
        if self.held_out.is_empty() {
            return "no miss outside the hot set counted: no earlier start of this bundle in \
                    the chunk cache"
                .into();
        }
        let each: Vec<String> = self
            .held_out
            .iter()
            .map(|h| {
                let starts = coldstart_units::count(h.runs as u64, "start");
                format!("{} {:.0} ({starts})", h.strategy, h.misses)
            })
            .collect();
        format!("misses outside the hot set, from earlier starts: {}", each.join(", "))
    }
}

/// Below this many bytes a transfer says little about bandwidth: latency dominates it.
pub const MIN_BANDWIDTH_SAMPLE: u64 = 64 * 1024;
/// The first bandwidth probe: cheap on a slow link (0.5 s at 256 kbit/s).
pub const PROBE_BYTES: u64 = 16 * 1024;
/// The second probe when the first took less than [`PROBE_ENOUGH`] (otherwise twice the first).
pub const PROBE_MORE_BYTES: u64 = 256 * 1024;
/// A transfer at least this long measures bandwidth well enough.
pub const PROBE_ENOUGH: Duration = Duration::from_millis(100);

/// What [`estimate_link`] measured, and the hot chunks its probes brought (verified; the
/// caller may keep them, and should count them as cached when predicting).
#[derive(Debug, Clone)]
pub struct Probe {
    /// The link measured.
    pub link: LinkEstimate,
    /// The hot chunks the probes brought, with their bytes.
    pub chunks: Vec<(coldstart_bundle::Chunk, Vec<u8>)>,
}

/// Measures what `hint` does not give.
///
/// With a hot part larger than [`PROBE_BYTES`]: two back-to-back Range requests of its start,
/// at chunk boundaries, of about [`PROBE_BYTES`] and then [`PROBE_MORE_BYTES`] more (twice the
/// first if the first took [`PROBE_ENOUGH`] or longer); from `t = latency + bytes / bandwidth`
/// for both, bandwidth is the second's extra bytes over its extra time and latency the rest
/// of the first. The bytes are the hot set's first chunks, which every strategy needs, so they
/// are returned verified instead of thrown away: probing costs about two latencies.
///
/// Otherwise: latency is the time of a one-byte Range request of the manifest; bandwidth
/// comes from `manifest_fetch` (bytes and time, less one latency) when it is at least
/// [`MIN_BANDWIDTH_SAMPLE`] bytes, else from the hot part or the largest cold object, at most
/// [`PROBE_BYTES`].
pub fn estimate_link(
    remote: &dyn Remote,
    manifest: &Manifest,
    manifest_fetch: Option<(u64, Duration)>,
    hint: Option<LinkEstimate>,
) -> Result<Probe, FetchError> {
    if let Some(link) = hint {
        return Ok(Probe { link, chunks: Vec::new() });
    }
    let fetch = |path: &str, range: (u64, u64)| -> Result<(Vec<u8>, f64), FetchError> {
        let t = Instant::now();
        let mut body = Vec::new();
        remote.fetch(path, Span::Range(range.0, range.1), &mut |b| {
            body.extend_from_slice(b);
            true
        })?;
        Ok((body, t.elapsed().as_secs_f64()))
    };
    let hot = manifest.hot_chunks();
    // The end of the first chunk that ends at or after `at`.
    let boundary = |at: u64| {
        hot.iter().map(|(o, c)| o + c.stored_len()).find(|&e| e >= at).unwrap_or(manifest.hot.size)
    };
    let a = boundary(PROBE_BYTES);
    if manifest.hot.size > a {
        let base = manifest.hot.offset;
        let (first, t1) = fetch(START_OBJECT, (base, base + a))?;
        let more = if t1 < PROBE_ENOUGH.as_secs_f64() { PROBE_MORE_BYTES } else { 2 * a };
        let b = boundary(a + more);
        let (second, t2) = fetch(START_OBJECT, (base + a, base + b))?;
        let bw = if t2 > t1 + 1e-4 { (b - a - a) as f64 / (t2 - t1) } else { 0.0 };
        let bw = if bw > 0.0 && b - a > a { bw } else { (b - a) as f64 / t2.max(1e-4) };
        let latency = (t1 - a as f64 / bw).max(0.0);
        let mut bytes = first;
        bytes.extend_from_slice(&second);
        let (chunks, _, _) = whole_hot_chunks(manifest, &bytes);
        return Ok(Probe { link: LinkEstimate::measured(bw, latency), chunks });
    }
    let latency = fetch("manifest.json", (0, 1))?.1;
    let (bytes, secs) = match manifest_fetch.filter(|(b, _)| *b >= MIN_BANDWIDTH_SAMPLE) {
        Some((b, d)) => (b, d.as_secs_f64()),
        None => {
            let (path, at, size) = if manifest.hot.size > 0 {
                (START_OBJECT.to_owned(), manifest.hot.offset, manifest.hot.size)
            } else {
                manifest
                    .objects
                    .iter()
                    .map(|o| (coldstart_bundle::object_path(&o.sha256), 0, o.size))
                    .max_by_key(|(_, _, s)| *s)
                    .unwrap_or_default()
            };
            if size == 0 {
                (0, 0.0)
            } else {
                let (body, t) = fetch(&path, (at, at + size.min(PROBE_BYTES)))?;
                (body.len() as u64, t)
            }
        }
    };
    let link = LinkEstimate::measured(bandwidth(bytes, secs - latency), latency);
    Ok(Probe { link, chunks: Vec::new() })
}

/// Bytes per second of `bytes` received in `secs`; when that is too little or too fast to
/// tell, as fast as the sample allows (at least 1 Gbit/s).
pub(crate) fn bandwidth(bytes: u64, secs: f64) -> f64 {
    if bytes > 0 && secs > 1e-4 {
        bytes as f64 / secs
    } else {
        (bytes as f64 / 1e-4).max(125e6)
    }
}

/// The hot chunks wholly within `hot`, the hot part's first bytes, each verified (one that
/// fails its check is left out); also the end of the last of them and how many there were.
pub(crate) fn whole_hot_chunks(
    manifest: &Manifest,
    hot: &[u8],
) -> (Vec<(coldstart_bundle::Chunk, Vec<u8>)>, usize, usize) {
    let mut chunks = Vec::new();
    let (mut end, mut count) = (0, 0);
    for (o, c) in manifest.hot_chunks() {
        let until = (o + c.stored_len()) as usize;
        let Some(stored) = hot.get(o as usize..until) else { break };
        if let Some(data) = coldstart_bundle::decode_chunk(manifest.compression, c, stored) {
            chunks.push((c.clone(), data));
        }
        (end, count) = (until, count + 1);
    }
    (chunks, end, count)
}

#[cfg(test)]
mod tests {
    use coldstart_bundle::EntryKind;

    use super::*;
    use crate::testing::Slow;

    fn link(mbit: f64, ms: f64) -> LinkEstimate {
        LinkEstimate::given(mbit * 1e6, Duration::from_secs_f64(ms / 1e3))
    }

    fn params(local_ms: u64) -> Params {
        Params {
            connections: 4,
            readahead: 16 * 1024,
            local: Some(Duration::from_millis(local_ms)),
        }
    }

    fn get(p: &[Prediction], s: Strategy) -> f64 {
        p.iter().find(|x| x.strategy == s).unwrap().ms
    }

    /// 100 files of 1 MB; a hot set of 64 chunks of 64 KiB (4 MiB).
    fn big() -> Shape {
        Shape {
            file_bytes: 100_000_000,
            files: 100,
            hot_miss_bytes: 64 * 65536,
            hot_misses: 64,
            hot_span_bytes: 64 * 65536,
            chunk_size: 65536,
            has_hot_set: true,
            all_miss_bytes: 100_000_000,
            all_misses: 1600,
            ..Shape::default()
        }
    }

    /// One file of `bytes` in `chunks` chunks of 4 KiB, none cached; with `hot`, every chunk is
    /// in the hot set.
    fn one_file(bytes: u64, chunks: u64, hot: bool) -> Shape {
        let s = Shape {
            file_bytes: bytes,
            files: 1,
            chunk_size: 4096,
            all_miss_bytes: bytes,
            all_misses: chunks,
            ..Shape::default()
        };
        if !hot {
            return s;
        }
        Shape {
            hot_miss_bytes: bytes,
            hot_misses: chunks,
            hot_span_bytes: bytes,
            has_hot_set: true,
            ..s
        }
    }

    #[test]
    fn terms_follow_the_engine() {
        let s = big();
        let p = predict(&s, &link(8.0, 100.0), &params(50));
        // 1 MB/s: 100 s of bytes, 100 latencies, local.
        assert!((get(&p, Strategy::Original) - (100_000.0 + 10_000.0 + 50.0)).abs() < 1.0);
        let hot = 64.0 * 65536.0 / 1e6 * 1e3;
        // A 16 KiB read-ahead asks for one 64 KiB chunk: every miss is one round trip.
        assert!((get(&p, Strategy::Paged) - (hot + 6400.0 + 50.0)).abs() < 1.0);
        assert!((get(&p, Strategy::Reordered) - (hot + 100.0 + 50.0)).abs() < 1.0);
        assert!((get(&p, Strategy::ReorderedPaged) - (hot + 100.0)).abs() < 1.0);
        assert_eq!(get(&p, Strategy::Stream), get(&p, Strategy::ReorderedPaged));
    }

    #[test]
    fn the_start_object_saves_the_hot_sets_latency_not_the_manifests_bytes() {
        let mut s = big();
        s.hot_prefix_bytes = s.hot_span_bytes;
        let l = link(8.0, 100.0);
        let before = predict(&s, &l, &params(50));
        // 10 kB of manifest: 10 ms at 1 MB/s.
        s.manifest = Some(ManifestCost { bytes: 10_000, start_object: false, hot_received: 0 });
        let separate = predict(&s, &l, &params(50));
        for (a, b) in before.iter().zip(&separate) {
            assert!((b.ms - a.ms - 110.0).abs() < 1e-6, "{a:?} {b:?}: one more request");
        }
        s.manifest = Some(ManifestCost { bytes: 10_000, start_object: true, hot_received: 0 });
        let one = predict(&s, &l, &params(50));
        let head = coldstart_bundle::start::HEADER_LEN as f64 / 1e3;
        for s in [Strategy::Reordered, Strategy::ReorderedPaged, Strategy::Stream] {
            // The manifest's bytes and the header's, but no request of its own.
            assert!((get(&one, s) - get(&before, s) - 10.0 - head).abs() < 1e-6, "{s}");
        }
        assert_eq!(get(&one, Strategy::Paged), get(&separate, Strategy::Paged));
        assert_eq!(get(&one, Strategy::Original), get(&separate, Strategy::Original));
        // A link sample's hot bytes: paid by all, no longer to come for the hot-set ones.
        let mut sampled = s.clone();
        sampled.manifest =
            Some(ManifestCost { bytes: 10_000, start_object: true, hot_received: 65536 });
        let p = predict(&sampled, &l, &params(50));
        for st in Strategy::ALL {
            let moved =
                if matches!(st, Strategy::Original | Strategy::Paged) { 65.536 } else { 0.0 };
            assert!((get(&p, st) - get(&one, st) - moved).abs() < 1e-6, "{st}");
        }
        // The start object's hot part starts at the hot part's start, cached chunks and all.
        let mut warm = s.clone();
        warm.hot_span_bytes = 65536;
        let p = predict(&warm, &l, &params(0));
        let sent = (10_000.0 + 64.0 * 65536.0) / 1e3 + head;
        assert!((get(&p, Strategy::ReorderedPaged) - (sent + 100.0)).abs() < 1e-6);
    }

    #[test]
    fn misses_outside_the_hot_set_cost_a_round_trip_each_and_can_make_original_best() {
        // 10 files of 530 KB; a hot set of 53 chunks (3.3 MB); 32 Mbit/s at 200 ms.
        let s = Shape {
            file_bytes: 5_300_000,
            files: 10,
            hot_miss_bytes: 3_300_000,
            hot_misses: 53,
            hot_span_bytes: 3_300_000,
            chunk_size: 65536,
            has_hot_set: true,
            all_miss_bytes: 5_300_000,
            all_misses: 90,
            ..Shape::default()
        };
        let l = link(32.0, 200.0);
        let none = predict(&s, &l, &params(50));
        assert_eq!(choose(&none), Strategy::ReorderedPaged);
        // Earlier starts missed 21 pieces of 4 KiB outside the hot set under each strategy.
        let h = |strategy| HeldOut {
            strategy,
            misses: 21.0,
            bytes: 21.0 * 4096.0,
            other_bytes: 21.0 * 4096.0,
            runs: 3,
        };
        let mut held = s.clone();
        held.held_out = Strategy::ALL.iter().map(|&st| h(st)).collect();
        let p = predict(&held, &l, &params(50));
        let extra = 21.0 * 200.0 + 21.0 * 4096.0 / 4e6 * 1e3;
        assert!(
            (get(&p, Strategy::Reordered) - get(&none, Strategy::Reordered) - extra).abs() < 1e-6
        );
        assert!((get(&p, Strategy::Paged) - get(&none, Strategy::Paged) - extra).abs() < 1e-6);
        // The program's waits overlap the hot request (1,025 ms), here longer than it.
        let rp = get(&p, Strategy::ReorderedPaged);
        assert!((rp - (50.0 + extra)).abs() < 1e-6, "{rp}");
        assert_eq!(get(&p, Strategy::Original), get(&none, Strategy::Original));
        assert_eq!(choose(&p), Strategy::Original);
        // On a slow link the hot request outlasts the waits, and their bytes add to it.
        let slow = link(2.0, 10.0);
        let (p2, none2) = (predict(&held, &slow, &params(50)), predict(&s, &slow, &params(50)));
        let bytes = 21.0 * 4096.0 / 250e3 * 1e3;
        let rp = get(&p2, Strategy::ReorderedPaged) - get(&none2, Strategy::ReorderedPaged);
        assert!((rp - bytes).abs() < 1e-6, "{rp}");
        // Bytes fetched besides them (brought ahead, background) share the link too.
        for x in held.held_out.iter_mut() {
            x.other_bytes = 500_000.0;
        }
        let p2 = predict(&held, &slow, &params(50));
        let rp = get(&p2, Strategy::ReorderedPaged) - get(&none2, Strategy::ReorderedPaged);
        assert!((rp - 2000.0).abs() < 1e-6, "{rp}");
        let r = get(&p2, Strategy::Reordered) - get(&none2, Strategy::Reordered);
        assert!((r - (21.0 * 10.0 + 2000.0)).abs() < 1e-6, "{r}");
        // A strategy without history is predicted with none.
        held.held_out.retain(|h| h.strategy != Strategy::Stream);
        let p = predict(&held, &l, &params(50));
        assert_eq!(get(&p, Strategy::Stream), get(&none, Strategy::Stream));
    }

    #[test]
    fn parallel_misses_share_a_round_trip() {
        let mut s = big();
        s.chunk_size = 4096;
        let mut p = params(0);
        p.readahead = 128 * 1024; // 32 chunks a read, 4 in flight
        let paged = get(&predict(&s, &link(8.0, 100.0), &p), Strategy::Paged);
        let hot = 64.0 * 65536.0 / 1e6 * 1e3;
        assert!((paged - (hot + 16.0 * 100.0)).abs() < 1.0, "{paged}");
    }

    #[test]
    fn slow_high_latency_link_and_small_hot_set_choose_a_hot_set_strategy() {
        let p = predict(&big(), &link(3.0, 200.0), &params(50));
        assert_eq!(choose(&p), Strategy::ReorderedPaged);
    }

    #[test]
    fn a_tiny_bundle_without_a_hot_set_on_a_fast_link_chooses_original() {
        // One 40 KB file in 10 chunks of 4 KiB, packed without a hot list.
        let s = one_file(40_000, 10, false);
        let pred = predict(&s, &link(1000.0, 1.0), &params(5));
        assert!(get(&pred, Strategy::Stream) > get(&pred, Strategy::Original));
        assert_eq!(choose(&pred), Strategy::Original);
    }

    #[test]
    fn a_wholly_hot_bundle_ties_and_the_tie_goes_to_reordered_paged() {
        let s = one_file(10_000, 3, true);
        let mut p = params(0);
        p.local = None;
        p.readahead = 4096; // one chunk a read: three round trips
        let pred = predict(&s, &link(1000.0, 1.0), &p);
        assert!(get(&pred, Strategy::Paged) > get(&pred, Strategy::Original));
        assert_eq!(get(&pred, Strategy::ReorderedPaged), get(&pred, Strategy::Original));
        assert_eq!(choose(&pred), Strategy::ReorderedPaged);
    }

    #[test]
    fn everything_cached_costs_only_local_start_up() {
        let s = Shape { chunk_size: 4096, has_hot_set: true, ..Shape::default() };
        let pred = predict(&s, &link(1.0, 500.0), &params(20));
        assert!(pred.iter().all(|p| (p.ms - 20.0).abs() < 1e-6), "{pred:?}");
    }

    #[test]
    fn shape_counts_only_what_is_not_cached() {
        use coldstart_bundle::{Chunk, ChunkRef, Entry, HotSet, Object};
        let h = |c: char| Sha256Hex::new(c.to_string().repeat(64)).unwrap();
        // Where each piece is: three hot ones in the hot part, one cold in object 0.
        let chunk = |o, sha, object, at| Chunk {
            offset: o,
            length: 100,
            sha256: h(sha),
            stored: None,
            object,
            at,
        };
        let file = |path: &str, chunks: Vec<Chunk>, sha| Entry {
            path: path.into(),
            kind: EntryKind::File,
            mode: 0o644,
            size: 100 * chunks.len() as u64,
            target: None,
            chunks,
            sha256: Some(h(sha)),
            mtime: 0,
            mtime_nsec: 0,
        };
        let m = Manifest {
            format: coldstart_bundle::FORMAT.into(),
            version: coldstart_bundle::VERSION,
            chunk_size: 100,
            compression: Default::default(),
            files: vec![
                file("a", vec![chunk(0, '1', None, 0), chunk(100, '2', None, 200)], 'a'),
                file("b", vec![chunk(0, '3', None, 100)], 'b'),
                file("c", vec![chunk(0, '4', Some(0), 0)], 'c'),
            ],
            objects: vec![Object { sha256: h('f'), size: 100 }],
            hot: HotSet {
                offset: 0,
                size: 300,
                chunks: vec![
                    ChunkRef { path: "a".into(), index: 0 },
                    ChunkRef { path: "b".into(), index: 0 },
                    ChunkRef { path: "a".into(), index: 1 },
                ],
            },
        };
        m.validate().unwrap();
        let all = Shape::of(&m, |_| false);
        assert_eq!((all.files, all.file_bytes), (2, 400), "the hot part and one cold object");
        assert!(all.has_hot_set);
        assert_eq!((all.all_misses, all.all_miss_bytes), (4, 400));
        assert_eq!((all.hot_misses, all.hot_miss_bytes, all.hot_span_bytes), (3, 300, 300));
        assert_eq!(all.hot_prefix_bytes, 300);
        // File c cached: original downloads the hot part only.
        let c = Shape::of(&m, |x| *x == h('4'));
        assert_eq!((c.files, c.file_bytes), (1, 300));
        // File b cached: the hot request spans all three chunks, original still downloads
        // the hot part whole.
        let b = Shape::of(&m, |x| *x == h('3'));
        assert_eq!((b.files, b.file_bytes), (2, 400));
        assert_eq!((b.hot_misses, b.hot_span_bytes), (2, 300));
        // The first hot chunk cached: the request starts at the second.
        let first = Shape::of(&m, |x| *x == h('1'));
        assert_eq!(first.hot_span_bytes, 200);
        assert_eq!(first.hot_prefix_bytes, 300, "the start object sends it all the same");
        // The last hot chunk cached: neither request sends it.
        let last = Shape::of(&m, |x| *x == h('2'));
        assert_eq!((last.hot_span_bytes, last.hot_prefix_bytes), (200, 200));
        let none = Shape::of(&m, |_| true);
        assert_eq!(none, Shape { chunk_size: 100, has_hot_set: true, ..Shape::default() });
    }

    /// A bundle directory whose start object is the hot part `data` alone (at offset 0), on a
    /// link of 30 ms and 1 KiB per ms.
    fn slow_hot_blob(data: &[u8]) -> (tempfile::TempDir, Slow) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(START_OBJECT), data).unwrap();
        std::fs::write(dir.path().join("manifest.json"), b"{}").unwrap();
        let remote = Slow {
            latency: Duration::from_millis(30),
            bytes_per_second: 1_024_000,
            ..Slow::new(dir.path(), |_| true)
        };
        (dir, remote)
    }

    #[test]
    fn the_link_is_measured_unless_given() {
        let (_dir, remote) = slow_hot_blob(&vec![0; 1 << 20]);
        let m = Manifest {
            format: coldstart_bundle::FORMAT.into(),
            version: coldstart_bundle::VERSION,
            chunk_size: 65536,
            compression: Default::default(),
            files: Vec::new(),
            objects: Vec::new(),
            hot: coldstart_bundle::HotSet { size: 1 << 20, ..Default::default() },
        };
        let given = link(3.0, 200.0);
        assert_eq!(estimate_link(&remote, &m, None, Some(given)).unwrap().link, given);
        let l = estimate_link(&remote, &m, None, None).unwrap().link;
        assert!(l.latency_estimated && l.bandwidth_estimated);
        // The remote sleeps 30 ms per request and 1 ms per KiB. A loaded machine stretches
        // either sleep, and a stretched first request shortens the difference the bandwidth
        // is solved from: only the order of magnitude is certain.
        assert!((30.0..300.0).contains(&l.latency_ms), "{l:?}");
        assert!((300e3..=3e6).contains(&l.bytes_per_second), "{l:?}");
    }

    #[test]
    fn the_probe_brings_the_first_hot_chunks_verified() {
        use coldstart_bundle::{sha256_hex, Chunk, ChunkRef, Entry, HotSet};
        let data: Vec<u8> =
            (0..1u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
        let chunks: Vec<Chunk> = data
            .chunks(16384)
            .enumerate()
            .map(|(i, c)| Chunk {
                offset: i as u64 * 16384,
                length: 16384,
                sha256: sha256_hex(c),
                stored: None,
                object: None,
                at: i as u64 * 16384,
            })
            .collect();
        let m = Manifest {
            format: coldstart_bundle::FORMAT.into(),
            version: coldstart_bundle::VERSION,
            chunk_size: 16384,
            compression: Default::default(),
            objects: Vec::new(),
            hot: HotSet {
                offset: 0,
                size: data.len() as u64,
                chunks: (0..chunks.len())
                    .map(|index| ChunkRef { path: "f".into(), index })
                    .collect(),
            },
            files: vec![Entry {
                path: "f".into(),
                kind: EntryKind::File,
                mode: 0o644,
                size: data.len() as u64,
                target: None,
                chunks,
                sha256: Some(sha256_hex(&data)),
                mtime: 0,
                mtime_nsec: 0,
            }],
        };
        let (_dir, remote) = slow_hot_blob(&data);
        let p = estimate_link(&remote, &m, None, None).unwrap();
        // 16 KiB, then 256 KiB more: the first 17 chunks, each checked against its SHA-256.
        assert_eq!(p.chunks.len(), 17);
        for (i, (c, bytes)) in p.chunks.iter().enumerate() {
            assert_eq!(c.offset, i as u64 * 16384);
            assert!(coldstart_bundle::verify_chunk(c, bytes));
        }
        // 30 ms and 1 KiB/ms, give or take a loaded machine.
        assert!((10.0..150.0).contains(&p.link.latency_ms), "{:?}", p.link);
        assert!((0.5e6..1.2e6).contains(&p.link.bytes_per_second), "{:?}", p.link);
    }
}
