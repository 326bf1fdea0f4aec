//! Property tests of the dynamic and graph allocators on random inputs
//! (seeded, thousands of cases): no two live tensors overlap, every tensor
//! lies inside its chunk, alignment, at most 16 chunks within max size, the
//! peak covers the largest live set and is far below the sum of all tensors,
//! and a reserved allocator allocates nothing for smaller graphs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ggml_core::alloc::{Addr, DynAlloc, GraphAlloc, VBUFFER_MAX_CHUNKS};
use ggml_core::host::HostBufferType;
use ggml_core::{Buffer, BufferType, Flags, Graph, TensorId, Type};

use test_support::Rng;

#[path = "common/transformer.rs"]
mod transformer;

use transformer::{weight, Dims};

// ------------------------------------------------------------------ DynAlloc

#[test]
fn dyn_alloc_random_sequences() {
    let mut rng = Rng(1);
    for case in 0..2000 {
        let alignment = 1 << rng.range(0, 8);
        let max_chunk = rng.range(1, 64) * 256;
        let mut a = DynAlloc::new(alignment, max_chunk);
        let max_chunk = a.max_chunk_size();
        // live blocks: (chunk, offset) -> padded size
        let mut live: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
        for _ in 0..rng.range(1, 200) {
            if live.is_empty() || rng.chance(60) {
                let size = rng.range(0, max_chunk);
                match a.alloc(size) {
                    Ok(addr) => {
                        let padded = a.padded_size(size).unwrap();
                        assert_eq!(addr.offset % alignment, 0, "case {case}: alignment");
                        assert!(addr.chunk < VBUFFER_MAX_CHUNKS, "case {case}");
                        assert!(addr.offset + padded <= max_chunk, "case {case}: in chunk");
                        // no overlap with any live block of the chunk
                        let prev = live.range(..(addr.chunk, addr.offset + 1)).next_back();
                        if let Some((&(c, o), &(_, s))) = prev {
                            assert!(c != addr.chunk || o + s <= addr.offset, "case {case}");
                        }
                        let next = live.range((addr.chunk, addr.offset)..).next();
                        if let Some((&(c, o), _)) = next {
                            assert!(c != addr.chunk || addr.offset + padded <= o, "case {case}");
                        }
                        live.insert((addr.chunk, addr.offset), (padded, size));
                    }
                    Err(_) => {
                        // only when every chunk is open and none has room
                        assert_eq!(a.n_chunks(), VBUFFER_MAX_CHUNKS, "case {case}");
                    }
                }
            } else {
                let k = rng.below(live.len());
                let (&(chunk, offset), &(_, size)) = live.iter().nth(k).unwrap();
                live.remove(&(chunk, offset));
                a.free(Addr { chunk, offset }, size).unwrap();
            }
            assert!(a.n_chunks() <= VBUFFER_MAX_CHUNKS);
            assert!(a.chunk_sizes().iter().all(|&s| s <= max_chunk));
        }
        // freeing everything merges every chunk back into one free range
        for (&(chunk, offset), &(_, size)) in &live {
            a.free(Addr { chunk, offset }, size).unwrap();
        }
        assert_eq!(a.free_bytes(), a.total_size(), "case {case}: merged");
        if a.n_chunks() > 0 {
            let big = a.alloc(max_chunk).unwrap();
            assert_eq!(big.offset, 0, "case {case}: whole chunk free again");
        }
    }
}

// ------------------------------------------------------------------ graphs

fn weights_buffer() -> Arc<dyn Buffer> {
    let bt: Arc<dyn BufferType> = HostBufferType::new("weights", 64, usize::MAX);
    bt.alloc_buffer(64).unwrap()
}

/// A llama-shaped graph: `n_layer` blocks of attention and feed-forward over
/// `n_tokens` tokens, with placed weights.
fn transformer(n_layer: usize, n_tokens: usize, buf: &Arc<dyn Buffer>) -> Graph {
    let dims = Dims {
        d: 128,
        n_head: 4,
        ff: 256,
        vocab: 512,
    };
    transformer::transformer(&dims, n_tokens, buf, |_, l| l < n_layer)
}

/// A random graph of F32 element-wise ops, matrix products, views, copies
/// and cross-links, with inputs, placed weights and random outputs.
fn random_graph(rng: &mut Rng, buf: &Arc<dyn Buffer>) -> Graph {
    let mut g = Graph::new();
    let mut pool: Vec<TensorId> = Vec::new();
    for i in 0..rng.range(1, 4) {
        let ne0 = 4 * rng.range(1, 24);
        let ne1 = rng.range(1, 12);
        pool.push(g.input(format!("in{i}"), Type::F32, &[ne0, ne1]));
    }
    let n_ops = rng.range(5, 120);
    for k in 0..n_ops {
        // prefer recent tensors, as real graphs do
        let pick = |rng: &mut Rng, pool: &[TensorId]| {
            let n = pool.len();
            pool[n - 1 - rng.below(n.min(8))]
        };
        let a = pick(rng, &pool);
        let da = g.desc(a).clone();
        let r = match rng.below(12) {
            0 | 1 => {
                let b = pool
                    .iter()
                    .rev()
                    .copied()
                    .find(|&b| b != a && g.desc(b).ne == da.ne && rng.chance(70))
                    .unwrap_or(a);
                if rng.chance(50) {
                    g.add_op(a, b)
                } else {
                    g.mul(a, b)
                }
            }
            2 => g.scale(a, 0.5),
            3 => g.silu(a),
            4 => g.rms_norm(a, 1e-5),
            5 | 6 => {
                let m = 4 * rng.range(1, 24);
                let w = weight(&mut g, buf, &format!("w{k}"), &[da.ne[0], m]);
                g.mul_mat(w, a)
            }
            7 if da.is_contiguous() => g.reshape(a, &[da.n_elements()]),
            8 => {
                let t = g.transpose(a).unwrap();
                if rng.chance(70) {
                    g.cont(t)
                } else {
                    Ok(t)
                }
            }
            9 if da.is_contiguous() && da.ne[0] >= 2 => {
                let half = da.ne[0] / 2;
                g.view_2d(a, half, da.ne[1], da.nb[1], 0)
            }
            10 => {
                // copy into a fresh (unplaced, non-input) tensor
                let dst = g.new_tensor(format!("dst{k}"), Type::F32, &[da.n_elements()]);
                g.cpy(a, dst)
            }
            _ => g.cont(a),
        };
        let Ok(id) = r else { continue };
        if g.desc(id).ty == Type::F32 && g.desc(id).n_elements() > 0 {
            pool.push(id);
        }
        if rng.chance(5) {
            g.set_output(id);
        }
    }
    let last = *pool.last().unwrap();
    g.set_output(last);
    g
}

/// Checks the placements `alloc_graph` gave a graph processed in id order.
struct Check<'a> {
    g: &'a Graph,
    alignment: usize,
}

const NEVER: usize = usize::MAX;

impl Check<'_> {
    /// Tensors with memory of their own from the allocator, with their
    /// lifetime `[def, end]` in steps (node indices; inputs start at 0).
    fn lifetimes(&self, weights: &Arc<dyn Buffer>) -> Vec<(TensorId, usize, usize)> {
        let g = self.g;
        let n = g.len();
        // consumers of each base, through views
        let mut last_use = vec![None::<usize>; n];
        let mut endless = vec![false; n];
        let mut has_consumer = vec![false; n];
        for id in g.ids() {
            for &s in &g.node(id).src {
                has_consumer[s.index()] = true;
                let (base, _) = g.view_base(s);
                let lu = &mut last_use[base.index()];
                *lu = Some(lu.map_or(id.index(), |x: usize| x.max(id.index())));
            }
        }
        for id in g.ids() {
            let node = g.node(id);
            let (base, _) = g.view_base(id);
            if node.flags.contains(Flags::OUTPUT) || node.flags.contains(Flags::INPUT) {
                endless[base.index()] = true;
            }
            // an unused view (or tensor) keeps its base forever
            if !has_consumer[id.index()] {
                endless[base.index()] = true;
            }
        }
        let mut out = Vec::new();
        for id in g.ids() {
            let node = g.node(id);
            let Some(at) = &node.at else { continue };
            if node.view.is_some() || Arc::ptr_eq(&at.buffer, weights) {
                continue;
            }
            let def = if node.flags.contains(Flags::INPUT) {
                0
            } else {
                id.index()
            };
            let end = if endless[id.index()] {
                NEVER
            } else {
                last_use[id.index()].unwrap_or(NEVER)
            };
            out.push((id, def, end));
        }
        out
    }

    fn range(&self, id: TensorId) -> (usize, usize, usize) {
        let at = self.g.node(id).at.as_ref().unwrap();
        let size = self
            .g
            .desc(id)
            .nbytes()
            .max(1)
            .next_multiple_of(self.alignment);
        (
            Arc::as_ptr(&at.buffer) as *const () as usize,
            at.offset,
            at.offset + size,
        )
    }

    /// No two tensors alive at the same step share bytes, except a node
    /// computed in place over its first source at the step the source dies.
    fn no_overlap(&self, lives: &[(TensorId, usize, usize)]) {
        for (i, &(a, da, ea)) in lives.iter().enumerate() {
            let (ca, sa, xa) = self.range(a);
            for &(b, db, eb) in &lives[i + 1..] {
                let (cb, sb, xb) = self.range(b);
                let mem = ca == cb && sa < xb && sb < xa;
                let time = da <= eb && db <= ea;
                if !(mem && time) {
                    continue;
                }
                let inplace = |p: TensorId, dp_end: usize, c: TensorId, dc: usize| {
                    self.g.node(c).src.first() == Some(&p)
                        && dp_end == dc
                        && self.range(p) == self.range(c)
                };
                assert!(
                    inplace(a, ea, b, db) || inplace(b, eb, a, da),
                    "'{}' [{da}, {ea}] and '{}' [{db}, {eb}] overlap at {sa}..{xa} / {sb}..{xb}",
                    self.g.desc(a).name,
                    self.g.desc(b).name
                );
            }
        }
    }

    /// The largest sum of distinct live ranges at any step.
    fn largest_live_set(&self, lives: &[(TensorId, usize, usize)]) -> usize {
        let steps = self.g.len();
        let mut best = 0;
        for s in 0..steps {
            let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
            for &(id, d, e) in lives {
                if d <= s && s <= e {
                    let (c, lo, hi) = self.range(id);
                    seen.insert((c, lo), hi - lo);
                }
            }
            best = best.max(seen.values().sum());
        }
        best
    }
}

fn check_chunks(ga: &GraphAlloc, g: &Graph, weights: &Arc<dyn Buffer>, max: usize, align: usize) {
    let vb = ga.vbuffer(0).unwrap();
    assert!(vb.n_chunks() <= VBUFFER_MAX_CHUNKS);
    assert!(vb.chunk_sizes().iter().all(|&s| s <= max));
    for id in g.ids() {
        let node = g.node(id);
        if node.view.is_some() {
            continue;
        }
        let at = node
            .at
            .as_ref()
            .unwrap_or_else(|| panic!("'{}' has no memory", node.desc.name));
        if Arc::ptr_eq(&at.buffer, weights) {
            continue;
        }
        let in_chunk = (0..vb.n_chunks()).any(|c| Arc::ptr_eq(vb.chunk(c).unwrap(), &at.buffer));
        assert!(in_chunk, "'{}' is not in a chunk", node.desc.name);
        assert_eq!(at.offset % align, 0, "'{}' misaligned", node.desc.name);
        assert!(at.offset + node.desc.nbytes() <= at.buffer.size());
    }
}

#[test]
fn graph_alloc_random_graphs() {
    let weights = weights_buffer();
    let mut rng = Rng(7);
    let mut n_inplace = 0;
    for case in 0..2500 {
        let g0 = random_graph(&mut rng, &weights);
        let alignment = 1 << rng.range(2, 8);
        let largest = g0
            .nodes()
            .iter()
            .map(|n| n.desc.nbytes().next_multiple_of(alignment))
            .max()
            .unwrap();
        // small chunks in some cases, to exercise several of them
        let max = if rng.chance(50) {
            usize::MAX
        } else {
            (largest * rng.range(2, 6)).next_multiple_of(alignment)
        };
        let host = HostBufferType::new("compute", alignment, max);
        let mut ga = GraphAlloc::new(host.clone());
        let mut g = g0.clone();
        match ga.alloc_graph(&mut g) {
            Ok(_) => {}
            Err(e) => {
                // only possible when 16 small chunks cannot hold the live set
                assert!(max != usize::MAX, "case {case}: {e}");
                continue;
            }
        }
        n_inplace += ga.n_inplace();
        check_chunks(&ga, &g, &weights, max, host.alignment());
        let c = Check {
            g: &g,
            alignment: host.alignment(),
        };
        let lives = c.lifetimes(&weights);
        c.no_overlap(&lives);
        let peak = ga.buffer_size(0);
        assert!(peak >= c.largest_live_set(&lives), "case {case}");

        // reserved for this graph: allocating it again allocates nothing
        let allocs = host.n_allocs();
        let mut again = g0.clone();
        assert!(!ga.alloc_graph(&mut again).unwrap(), "case {case}");
        assert_eq!(host.n_allocs(), allocs, "case {case}");
    }
    assert!(n_inplace > 100, "in-place reuse happened {n_inplace} times");
}

#[test]
fn transformer_peak_is_far_below_the_sum() {
    let weights = weights_buffer();
    let host = HostBufferType::new("compute", 64, usize::MAX);
    let mut ga = GraphAlloc::new(host.clone());
    let mut g = transformer(16, 64, &weights);
    ga.alloc_graph(&mut g).unwrap();
    let c = Check {
        g: &g,
        alignment: 64,
    };
    let lives = c.lifetimes(&weights);
    c.no_overlap(&lives);
    let peak = ga.buffer_size(0);
    let live = c.largest_live_set(&lives);
    let sum: usize = lives
        .iter()
        .map(|&(id, _, _)| g.desc(id).nbytes().next_multiple_of(64))
        .sum();
    assert!(peak >= live);
    assert!(peak * 20 < sum, "peak {peak} vs sum {sum}");
    assert!(ga.n_inplace() >= 16, "in place: {}", ga.n_inplace());
}

#[test]
fn reserve_then_smaller_graphs_allocate_nothing() {
    let weights = weights_buffer();
    for &(max, n_layer) in &[(usize::MAX, 8), (16 << 20, 8), (6 << 20, 4)] {
        let host = HostBufferType::new("compute", 64, max);
        let mut ga = GraphAlloc::new(host.clone());
        let worst = transformer(n_layer, 512, &weights);
        assert!(ga.reserve(&worst).unwrap());
        let reserved = ga.buffer_size(0);
        let allocs = host.n_allocs();
        assert!(allocs >= 1);
        assert!(ga.vbuffer(0).unwrap().n_chunks() <= VBUFFER_MAX_CHUNKS);
        let mut rng = Rng(3);
        for _ in 0..60 {
            let t = if rng.chance(50) { 1 } else { rng.range(1, 512) };
            let mut g = transformer(n_layer, t, &weights);
            let grew = ga.alloc_graph(&mut g).unwrap();
            assert!(!grew, "max {max}: {t} tokens needed more than reserved");
            assert_eq!(host.n_allocs(), allocs);
            assert_eq!(ga.buffer_size(0), reserved);
        }
        // a larger graph grows, and says so
        let mut big = transformer(n_layer + 1, 600, &weights);
        assert!(ga.alloc_graph(&mut big).unwrap());
        assert!(host.n_allocs() > allocs);
    }
}

#[test]
fn measure_is_a_dry_run() {
    let weights = weights_buffer();
    let host = HostBufferType::new("compute", 64, usize::MAX);
    let mut ga = GraphAlloc::new(host.clone());
    let g = transformer(4, 32, &weights);
    let sizes = ga.measure(&g).unwrap();
    assert_eq!(host.n_allocs(), 0);
    assert!(g
        .nodes()
        .iter()
        .all(|n| n.at.is_none() || n.flags.contains(Flags::WEIGHT)));
    ga.reserve(&g).unwrap();
    assert_eq!(sizes, vec![ga.buffer_size(0)]);
}

#[test]
fn inputs_first_outputs_kept_and_in_place() {
    let weights = weights_buffer();
    let host = HostBufferType::new("compute", 32, usize::MAX);
    let mut ga = GraphAlloc::new(host);
    let mut g = Graph::new();
    let x = g.input("x", Type::F32, &[8, 2]);
    let w = weight(&mut g, &weights, "w", &[8, 8]);
    let a = g.mul_mat(w, x).unwrap(); // [8, 2]
    let b = g.scale(a, 2.0).unwrap(); // in place over a
    let c = g.silu(b).unwrap(); // in place over b
    g.set_output(c);
    let d = g.mul_mat(w, c).unwrap(); // c is an output: no reuse
    let e = g.scale(d, 1.0).unwrap();
    let y = g.input("y", Type::F32, &[8, 2]); // a late input is placed first
    let f = g.add_op(e, y).unwrap();
    g.set_output(f);
    ga.alloc_graph(&mut g).unwrap();
    let off = |id: TensorId| g.node(id).at.as_ref().unwrap().offset;
    assert_eq!((off(x), off(y)), (0, 64));
    assert_eq!(off(a), off(b));
    assert_eq!(off(b), off(c));
    assert_ne!(off(d), off(c));
    assert_eq!(off(e), off(d));
    assert_ne!(off(f), off(c), "outputs never share memory");
    assert!(ga.n_inplace() >= 3);
}

#[test]
fn misuse_is_an_error() {
    let weights = weights_buffer();
    let a: Arc<dyn BufferType> = HostBufferType::new("a", 32, usize::MAX);
    let b: Arc<dyn BufferType> = HostBufferType::new("b", 32, usize::MAX);
    let mut ga = GraphAlloc::with_buffer_types(vec![a.clone(), b, a]).unwrap();
    let mut g = transformer(1, 4, &weights);
    // several buffer types need ids
    assert!(ga.alloc_graph(&mut g).is_err());
    let order: Vec<TensorId> = g.ids().collect();
    assert!(ga.alloc_graph_n(&mut g, &order, &[0; 3]).is_err());
    let bad = vec![5; g.len()];
    assert!(ga.alloc_graph_n(&mut g, &order, &bad).is_err());
    let twice: Vec<TensorId> = order.iter().chain(&order).copied().collect();
    let zeros = vec![0; g.len()];
    assert!(ga.alloc_graph_n(&mut g, &twice, &zeros).is_err());
    // index 2 shares index 0's buffer
    let ids: Vec<usize> = (0..g.len()).map(|i| [0, 1, 2][i % 3]).collect();
    ga.alloc_graph_n(&mut g, &order, &ids).unwrap();
    assert!(ga.buffer_size(0) > 0 && ga.buffer_size(1) > 0);
    assert_eq!(ga.buffer_size(2), 0);
    assert!(GraphAlloc::with_buffer_types(Vec::new()).is_err());
}
