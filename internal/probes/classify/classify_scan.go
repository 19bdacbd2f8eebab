package classify

// The classifier's literal prefilter.
//
// Almost every line of a training log is ordinary progress output. Before any
// detector looks at a line, one pass over its bytes finds which of a fixed set
// of keywords it contains ("out of memory", "Error", "epoch", ...). A line
// containing none of them costs that pass and nothing else: no regular
// expression, no allocation.
//
// The pass looks the byte pairs at even indexes up in a table of 65,536
// entries, one 64-bit load for four pairs. Each keyword is registered
// under two overlapping byte pairs, its anchors (in both cases where the
// keyword ignores case), one of which a line always puts at an even index:
// the pairs that are rarest in typical training output (a built-in sample of
// such output decides), so that the table rarely sends the scan to verify
// a keyword that is not there.

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"sync"
)

// kw names a keyword of the prefilter. The order is the order of the bits in
// a hitSet, nothing more.
type kw uint8

const (
	// failures
	kwOutOfMem kw = iota
	kwAllocFailed
	kwExhausted
	kwOOM
	kwCPUAlloc
	kwNotEnough
	kwUnableAlloc
	kwCanNot
	kwCalloc
	kwEigen
	kwMemoryError
	kwKilled
	kwExit
	kwSIGKILL
	kwSignal9
	kwTerminated
	kwIllegal
	kwAssert
	kwKernelImage
	kwWatchdog
	kwPGNCCL
	kwSegfault
	kwSIGSEGV
	kwBusError
	kwNaN
	kwCudaError
	kwHipError
	kwRuntimeErr
	kwCudnn
	kwCancelled
	kwCoreDumped
	kwAborted
	kwRootCause
	kwError
	kwException
	kwExpandable
	kwAutoBatch
	kwInfinite
	kwBadAlloc    // "std::bad_alloc"
	kwExceeded    // "xceeded": Slurm's "exceeded memory limit", "Exceeded job memory limit"
	kwKVCache     // "KV cache": vLLM's KV cache does not hold max_model_len (forms2026.go)
	kwCacheBlocks // "the cache blocks": vLLM's "No available memory for the cache blocks"
	kwDesiredGPU  // "desired GPU": vLLM's start-up check of free memory
	kwOutOf       // "OUT_OF_": Level Zero / UR / SYCL / CUDA driver status codes
	kwLowOnMem    // "low on memory": Ray's memory monitor ("the node running low on memory"), host_reporters.go
	kwLowOnRes    // "low on resource: memory": the kubelet's eviction for memory pressure, host_reporters.go
	kwAllRAM      // "all available RAM": Colab's "Your session crashed after using all available RAM", host_reporters.go

	// phases
	kwEpoch
	kwValid
	kwValBracket
	kwValTime
	kwEvaluat
	kwEvalDict
	kwEvalBracket
	kwTrain
	kwSanity
	kwTest
	kwInference
	kwStars
	kwLossDict
	kwGPUMem
	kwImages
	kwTop1
	kwSkipped
	kwOverflow
	kwIter
	kwGpuguard
	kwStep
	kwNumUpdates
	kwUpdate // "update 1100": an optimizer update's counter
	kwTraceback
	kwParenVal
	kwParenTest
	kwParenTrain
	kwEvalBatch // Composer's console logger "[Eval batch=3/10] Eval on eval data:"
	kwBatchEq   // Composer's console logger "[batch=16/100]:"
	kwFrame     // a Python traceback's frame: `File "x.py", line 12, in validate`
	kwOctalCR   // a literal "#015" (carriage return), see Classifier.octalFrames
	kwOctalEsc  // a literal "#033" (escape)
	kwEscNL     // a literal "\\n" (an escaped newline inside quoted text: a JSON log record), see Classifier.escapedFrames

	kwCount
)

// kwEntry is one entry of the prefilter.
type kwEntry struct {
	id   kw
	text string // lower case where fold is set
	fold bool   // match ASCII letters without regard to case
}

var kwTable = []kwEntry{
	{kwOutOfMem, "out of memory", true},
	{kwAllocFailed, "_ALLOC_FAILED", false},
	{kwExhausted, "exhausted", true},
	{kwOOM, "oom", true},
	{kwCPUAlloc, "CPUAllocator", false},
	{kwNotEnough, "not enough memory", true},
	{kwUnableAlloc, "unable to allocate", true},
	{kwCanNot, "can NOT allocate", false},
	{kwCalloc, "CUDA calloc", false},
	{kwEigen, "EigenAllocator", false},
	{kwMemoryError, "MemoryError", false},
	{kwKilled, "killed", true},
	{kwExit, "exit", true},
	{kwSIGKILL, "SIGKILL", false},
	{kwSignal9, "signal 9", true},
	{kwTerminated, "terminated", true},
	{kwIllegal, "illegal memory access", true},
	{kwAssert, "device-side assert", true},
	{kwKernelImage, "no kernel image", true},
	{kwWatchdog, "watchdog caught", true},
	{kwPGNCCL, "ProcessGroupNCCL", false},
	{kwSegfault, "segmentation fault", true},
	{kwSIGSEGV, "SIGSEGV", false},
	{kwBusError, "bus error", true},
	{kwNaN, "nan", true},
	{kwCudaError, "cuda error", true},
	{kwHipError, "HIP error", false},
	{kwRuntimeErr, "runtime error", true},
	{kwCudnn, "CUDNN_STATUS_", false},
	{kwCancelled, "CANCELLED AT", false},
	{kwCoreDumped, "core dumped", true},
	{kwAborted, "Aborted", false},
	{kwRootCause, "Root Cause", false},
	{kwError, "Error", false},
	{kwException, "Exception", false},
	{kwExpandable, "expandable_segments", false},
	{kwAutoBatch, "AutoBatch", false},
	{kwInfinite, "infinite", true},
	{kwBadAlloc, "std::bad_alloc", false},
	{kwExceeded, "xceeded", false},
	{kwKVCache, "kv cache", true},
	{kwCacheBlocks, "the cache blocks", false},
	{kwDesiredGPU, "desired GPU", false},
	{kwOutOf, "OUT_OF_", false},
	{kwLowOnMem, "low on memory", false},
	{kwLowOnRes, "low on resource: memory", false},
	{kwAllRAM, "all available RAM", false},

	{kwEpoch, "epoch", true},
	{kwValid, "valid", true},
	{kwValBracket, "[val", false},
	{kwValTime, "val_time", false},
	{kwEvaluat, "evaluat", true},
	{kwEvalDict, "{'eval_", false},
	{kwEvalBracket, "[eval", false},
	{kwTrain, "train", true},
	{kwSanity, "Sanity Check", false},
	{kwTest, "Test", false},
	{kwInference, "inference", true},
	{kwStars, "***** Running", false},
	{kwLossDict, "{'loss'", false},
	{kwGPUMem, "gpu_mem", true},
	{kwImages, "Images", false},
	{kwTop1, "top1_acc", false},
	{kwSkipped, "skipped=", false},
	{kwOverflow, "OVERFLOW!", false},
	{kwIter, "iter", true},
	{kwGpuguard, "gpuguard:", false},
	{kwStep, "step", true},
	{kwNumUpdates, "num_updates", false},
	{kwUpdate, "update ", true},
	{kwTraceback, "Traceback (most", false},
	{kwParenVal, "(val", false},
	{kwParenTest, "(test)", false},
	{kwParenTrain, "(train)", false},
	{kwEvalBatch, "[Eval", false},
	{kwBatchEq, "[batch=", false},
	{kwFrame, "\", line ", false},
	{kwOctalCR, "#015", false},
	{kwOctalEsc, "#033", false},
	{kwEscNL, `\n`, false},
}

// failureKeywords and phaseKeywords split the hit set between the two kinds of
// detectors.
var failureKeywords, phaseKeywords hitSet

func init() {
	for _, k := range kwTable {
		if k.id < kwEpoch {
			failureKeywords.set(k.id, 0)
		} else {
			phaseKeywords.set(k.id, 0)
		}
	}
}

// hitSet records which keywords a line contains and where each first occurs.
type hitSet struct {
	bits [2]uint64
	pos  [kwCount]int32
}

func (h *hitSet) reset() { h.bits = [2]uint64{} }

// set records that keyword k occurs at at. The scan may find a later
// occurrence first (the anchors of a keyword are not always neighbours, see
// newKWMatcher): the earliest place is kept.
func (h *hitSet) set(k kw, at int) {
	w, b := k>>6, uint64(1)<<(k&63)
	if h.bits[w]&b == 0 || int32(at) < h.pos[k] {
		h.bits[w] |= b
		h.pos[k] = int32(at)
	}
}

func (h *hitSet) has(k kw) bool { return h.bits[k>>6]&(1<<(k&63)) != 0 }

// at is where keyword k first occurs; only meaningful when has(k).
func (h *hitSet) at(k kw) int { return int(h.pos[k]) }

func (h *hitSet) empty() bool { return h.bits[0]|h.bits[1] == 0 }

func (h *hitSet) any(m *hitSet) bool {
	return h.bits[0]&m.bits[0] != 0 || h.bits[1]&m.bits[1] != 0
}

// asciiFold maps ASCII upper-case letters to lower case and every other byte to
// itself.
var asciiFold [256]byte

func init() {
	for i := range asciiFold {
		asciiFold[i] = byte(i)
		if i >= 'A' && i <= 'Z' {
			asciiFold[i] = byte(i) + 'a' - 'A'
		}
	}
}

// kwAnchor is a keyword registered under one of its byte pairs.
type kwAnchor struct {
	k   *kwEntry
	off int // offset of the anchor pair inside the keyword

	// The keyword's first eight bytes (or all of a shorter one) as one
	// word, to compare with one test: the word read from the line, with
	// fold's bits set, and masked, equals head exactly when those bytes
	// match. fold has 0x20 in each byte that is a letter of a keyword that
	// ignores case (x|0x20 is the lower-case letter exactly when x is that
	// letter in either case).
	head, fold, mask uint64
}

// newKWAnchor is the anchor of k at offset off.
func newKWAnchor(k *kwEntry, off int) kwAnchor {
	a := kwAnchor{k: k, off: off}
	for j := 0; j < min(8, len(k.text)); j++ {
		c := k.text[j]
		a.head |= uint64(c) << (8 * j)
		a.mask |= 0xff << (8 * j)
		if k.fold && c >= 'a' && c <= 'z' {
			a.fold |= 0x20 << (8 * j)
		}
	}
	return a
}

// kwMatcher is the prefilter's table. It is built once and shared read-only by
// every Classifier.
//
// A byte pair is the 16-bit little-endian word of its two bytes as they stand
// in the line (first byte low): the scan reads pairs straight from the text,
// with no case folding. A folded keyword's anchors are registered under each
// of their case variants.
type kwMatcher struct {
	// pair -> 1 + index into groups; 0: none. 128 KiB, but the pairs of
	// text (two printable ASCII bytes, or UTF-8 sequences) touch a small
	// part of it, which stays in the L1 cache.
	table  [1 << 16]uint16
	groups [][]kwAnchor // per pair, its keywords by decreasing offset (earlier start first)
	short  []*kwEntry   // keywords of two bytes, found by their first byte (bytes.IndexByte)
}

var (
	sharedKWMatcher     *kwMatcher
	sharedKWMatcherOnce sync.Once
)

func getKWMatcher() *kwMatcher {
	sharedKWMatcherOnce.Do(func() { sharedKWMatcher = newKWMatcher(kwTable) })
	return sharedKWMatcher
}

// anchorSample is typical training output. The byte pairs frequent in it
// make poor anchors: the scan would stop on them at every line.
const anchorSample = `Epoch 3:  45%|████▌     | 123/456 [00:12<00:30,  4.51it/s, loss=0.123, v_num=3]
Epoch 3:  46%|████▋     | 124/456 [00:12<00:30,  4.52it/s, loss=0.131, v_num=3]
Epoch 3:  46%|████▋     | 125/456 [00:12<00:30,  4.52it/s, loss=0.129, v_num=3]
Validation DataLoader 0:  50%|█████     | 10/20 [00:01<00:01,  9.80it/s]
 60%|██████    | 3/5 [00:02<00:01,  1.31it/s]
{'loss': 0.4021, 'grad_norm': 1.283, 'learning_rate': 4.5e-05, 'epoch': 0.53}
[2022-05-23 18:41:02,337] [INFO] [logging.py:69:log_dist] [Rank 0] step=120, skipped=5, lr=[3e-05], mom=[[0.9, 0.98]]
05/27 11:03:44 - mmengine - INFO - Epoch(train)  [2][3150/7329]  lr: 2.0000e-02  eta: 1 day, 19:22:41  time: 0.6115  data_time: 0.0094  memory: 6218  loss: 0.8127
     88/300      8.02G     0.9096     0.6011      1.079        587        640: 100%|██████████| 57/57 [00:47<00:00,  1.20it/s]
  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl
    return forward_call(*args, **kwargs)
INFO:root:iteration 1200 of 5000, train loss 2.417, val loss 2.603, tokens per second 41273.2
Loading checkpoint shards: 100%|██████████| 8/8 [00:27<00:00,  3.41s/it] using device cuda:0
Total train batch size (w. parallel, distributed & accumulation) = 128 with the model in configuration
[06/09 22:15:44 d2.utils.events]:  eta: 0:42:10  iter: 19  total_loss: 2.118  loss_cls: 0.9872  lr: 3.9962e-05  max_mem: 2911M
| epoch 001:    850 / 4120 loss=10.812, nll_loss=10.122, ppl=1114.36, wps=61204, ups=0.6, num_updates=847, lr=0.000105954
Downloading data files: 100%|██████████| 3/3 [00:00<00:00, 1024.00it/s] Map: 100%|██████████| 12304/12304 examples/s
    hidden = self.proj_in(tokens.float()).relu_()  # shared backbone, run once per batch; see configs/model/base.yaml
wandb: Syncing run lucky-sun-42 to https://wandb.ai/team/project/runs/abc123 with weight_decay: 0.05, betas: (0.9, 0.999)
`

// newKWMatcher registers each keyword under two of its byte pairs, at
// offsets a and b of different parity (bytes a, a+1 and b, b+1): whichever
// of the keyword's positions a line puts it at, one of the two pairs starts
// at an even index, the only pairs the scan reads. a and b are where the two
// pairs are rarest together in the sample (folded: case does not make a pair
// rarer), the first such choice on a tie. Any choice is correct; a rare one
// sends the scan to verify a keyword that is not there less often. Pairs
// apart from each other ("[b" and "h=" of "[batch=") are rarer together than
// neighbours, which share a byte. A keyword of two bytes has no such pair of
// pairs: it is found by its first byte.
func newKWMatcher(kws []kwEntry) *kwMatcher {
	var pairFreq [1 << 16]int
	s := anchorSample
	for i := 0; i+1 < len(s); i++ {
		pairFreq[uint16(asciiFold[s[i]])<<8|uint16(asciiFold[s[i+1]])]++
	}
	freq := func(k *kwEntry, o int) int {
		return pairFreq[uint16(asciiFold[k.text[o]])<<8|uint16(asciiFold[k.text[o+1]])]
	}
	m := &kwMatcher{}
	for i := range kws {
		k := &kws[i]
		if len(k.text) < 3 {
			if len(k.text) != 2 || k.fold {
				panic("classify: a keyword of fewer than two bytes, or of two that ignore case: " + k.text)
			}
			m.short = append(m.short, k)
			continue
		}
		bestA, bestB, bestFreq := 0, 1, -1
		for a := 0; a+2 < len(k.text); a++ {
			for b := a + 1; b+1 < len(k.text); b += 2 {
				if f := freq(k, a) + freq(k, b); bestFreq < 0 || f < bestFreq {
					bestA, bestB, bestFreq = a, b, f
				}
			}
		}
		for _, o := range [2]int{bestA, bestB} {
			a, b := k.text[o], k.text[o+1]
			firsts, seconds := []byte{a}, []byte{b}
			if k.fold {
				firsts, seconds = caseVariants(a), caseVariants(b)
			}
			for _, x := range firsts {
				for _, y := range seconds {
					pair := uint16(x) | uint16(y)<<8
					g := m.table[pair]
					if g == 0 {
						m.groups = append(m.groups, nil)
						g = uint16(len(m.groups))
						m.table[pair] = g
					}
					m.groups[g-1] = append(m.groups[g-1], newKWAnchor(k, o))
				}
			}
		}
	}
	return m
}

// caseVariants is the byte b in both cases when it is an ASCII letter.
func caseVariants(b byte) []byte {
	if b >= 'a' && b <= 'z' {
		return []byte{b, b - 'a' + 'A'}
	}
	return []byte{b}
}

// scan records in h every keyword that t contains.
//
// It reads the byte pairs that start at an even index, four from each 64-bit
// load, and looks the four up in the table of anchors with one branch per
// eight bytes: most words hold no anchor. In a word with one, each anchor
// is tested with one masked compare of the keyword's first eight bytes; most
// anchors are not their keyword. That test is written out in the loop, which
// calls a function only for the rare rest (a keyword that starts near the
// end of the line, or is longer than eight bytes and matched so far): a call
// in the path of every anchor costs more than the test (the line's slice and
// the hit set are saved around it). The table is the test itself: a
// separate bit set of the anchors would cost a variable shift per pair, and
// the table's read on every hit besides. The two-byte keywords are searched
// for by their first byte.
func (m *kwMatcher) scan(t []byte, h *hitSet) {
	h.reset()
	n := len(t)
	i := 0
	for ; i+8 <= n; i += 8 {
		w := binary.LittleEndian.Uint64(t[i : i+8])
		g0, g1, g2, g3 := m.table[uint16(w)], m.table[uint16(w>>16)], m.table[uint16(w>>32)], m.table[w>>48]
		if g0|g1|g2|g3 == 0 {
			continue
		}
		for gs := uint64(g0) | uint64(g1)<<16 | uint64(g2)<<32 | uint64(g3)<<48; gs != 0; {
			j := bits.TrailingZeros64(gs) / 16
			at, g := i+2*j, uint16(gs>>(16*j))
			gs &^= 0xffff << (16 * j)
			grp := m.groups[g-1]
			for k := range grp {
				a := &grp[k] // not a copy: the loop reads four of its words
				switch start := at - a.off; {
				case start < 0:
				case start > n-8:
					verifyNearEnd(t, start, a, h)
				case (binary.LittleEndian.Uint64(t[start:])|a.fold)&a.mask != a.head:
				case len(a.k.text) <= 8:
					h.set(a.k.id, start)
				default:
					verifyLong(t, start, a, h)
				}
			}
		}
	}
	for ; i+1 < n; i += 2 { // the last bytes, fewer than eight
		if g := m.table[uint16(t[i])|uint16(t[i+1])<<8]; g != 0 {
			grp := m.groups[g-1]
			for k := range grp {
				if start := i - grp[k].off; start >= 0 {
					verifyNearEnd(t, start, &grp[k], h)
				}
			}
		}
	}
	for _, k := range m.short {
		for off := 0; ; {
			j := bytes.IndexByte(t[off:], k.text[0])
			if j < 0 || off+j+1 >= n {
				break
			}
			if t[off+j+1] == k.text[1] {
				h.set(k.id, off+j)
				break
			}
			off += j + 1
		}
	}
}

// verifyNearEnd checks anchor a's keyword at t[start] (start >= 0) byte by
// byte: its first eight bytes may run past the end of the line.
func verifyNearEnd(t []byte, start int, a *kwAnchor, h *hitSet) {
	if end := start + len(a.k.text); end <= len(t) && a.k.equal(t[start:end], 0) {
		h.set(a.k.id, start)
	}
}

// verifyLong checks the bytes after the first eight of anchor a's keyword,
// longer than eight bytes and whose first eight match at t[start].
func verifyLong(t []byte, start int, a *kwAnchor, h *hitSet) {
	if end := start + len(a.k.text); end <= len(t) && a.k.equal(t[start+8:end], 8) {
		h.set(a.k.id, start)
	}
}

// equal says whether b is the keyword's text from byte from on (in either
// case where the keyword ignores case).
func (k *kwEntry) equal(b []byte, from int) bool {
	if k.fold {
		return eqFoldASCII(b, k.text[from:])
	}
	return string(b) == k.text[from:]
}

// eqFoldASCII reports whether b equals the lower-case ASCII string s when
// ASCII letters of b are folded to lower case.
func eqFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if asciiFold[b[i]] != s[i] {
			return false
		}
	}
	return true
}

// indexFoldASCII returns the index of the first occurrence of the lower-case ASCII
// string s in b, ignoring the case of ASCII letters in b, or -1.
func indexFoldASCII(b []byte, s string) int {
	if len(s) == 0 {
		return 0
	}
	c0 := s[0]
	for i := 0; i+len(s) <= len(b); i++ {
		if asciiFold[b[i]] == c0 && eqFoldASCII(b[i:i+len(s)], s) {
			return i
		}
	}
	return -1
}
