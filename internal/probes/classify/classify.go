package classify

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/gpuguard/gpuguard/internal/lines"
)

// ClassifierOptions configure a Classifier.
type ClassifierOptions struct {
	// PhasePatterns are extra phase markers from the policy: a line matching
	// one starts its phase. They are tried before the built-in markers.
	PhasePatterns []PhasePattern
	// OnEvent, when set, receives live events (a phase start, a step, a
	// failure line). It is called synchronously from Line and must not call
	// back into the Classifier.
	OnEvent func(Event)
	// AllocConf is the PyTorch allocator configuration the job ran with (the
	// value of PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF), when the caller
	// knows it. The fragmentation advice says whether expandable_segments was
	// already on. Empty means unknown: the log itself is searched for it.
	AllocConf string
}

// Classifier reads a job's output line by line and concludes what the job
// died of (see Kind), in which phase, on which rank, with the figures the
// out-of-memory message printed, and what to change.
//
// It is pure: it starts no process and reads no file. It keeps a bounded
// amount of state whatever the length of the stream (the current failure, a
// few lines of a multi-line message, at most maxPhaseMarks phase marks).
// It is not safe for concurrent use.
//
// How it decides:
//
//   - Each line's prefixes (rank tags, pastes' quotes, CI timestamps) are
//     removed and the rank kept; literal "#015" and "#033" (a carriage return
//     and an escape, as some log collectors write them) are honoured.
//   - A literal prefilter (classify_scan.go) picks the detectors that may
//     match; detectors are plain byte comparisons, most specific first.
//   - The first cause wins over its consequences (first_failure.go): what
//     other ranks print once one has failed (a collective timeout or abort,
//     a peer's broken connection, a rank torn down, an absurd allocation
//     beside a collective failure) never replaces a cause, and a cause
//     printed after one replaces it. Between causes the first wins, except
//     that a failure of a stronger class replaces a weaker one: a memory
//     failure (gpu_oom, cpu_alloc_oom, host_oom) beats a specific crash
//     (illegal memory access, NaN loss, ImportError, ...), which beats a
//     generic one (any other Python exception, a non-zero exit). Later lines
//     of the same report (the rest of a hard-wrapped message, torchrun's
//     root-cause block, Slurm's and the kernel's follow-up lines) refine the
//     first one.
//   - The step is the job's training step (a global step, an iteration, an
//     optimizer update: see StepKind and step.go); a progress bar's position
//     within an epoch is kept, with the epoch, only while no training step
//     has been seen. The verdict says which kind it is and the line it was
//     read from.
//   - A failure that training survived is dropped: when progress lines show
//     one counter (the training step, the position within the epoch, another
//     bar) advancing twice after the failure line, the error was caught and
//     handled (an OOM retried by the framework, an exception logged by a
//     callback). An OOM the program says it caught (fairseq, Ultralytics'
//     CPU fallback) needs one advance, and gives way to any later failure
//     that is not a consequence. The diagnosis still mentions it.
//   - The phase at a failure is the phase in effect at its line; when none
//     was seen yet, a progress bar redrawn within the next 5 lines supplies it
//     (tqdm redraws the bar of the phase that was running when a traceback
//     interrupted it).
type Classifier struct {
	opts ClassifierOptions
	m    *kwMatcher
	user []userPattern
	hits hitSet
	ph   phaseHit // the current line's phase hit
	buf  []byte   // frames of a line with literal "#015"
	ebuf []byte   // a line with escaped newlines, unescaped (message.go)
	jbuf []byte   // a JSON record's message and multi-line field, joined (message.go)
	tb   tbRecord // the rank a traceback's record named (recordRank)
	num  int      // number of the line being read
	rank int      // rank prefix of the line being read, -1 when none

	// phases
	phase    Phase
	explicit bool
	valDone  bool
	sawTrain bool // a training line was seen: a validation that ends goes back to training
	ge       struct {
		seen, resets bool
		step, epoch  int64
	} // the last training step printed with its epoch, and whether that counter restarts each epoch
	valEpoch     int64
	epoch        int64
	st           stepRead // the step the verdict reports
	stText       []byte   // the line st was read from, bounded by maxStepText
	stCut        uint8    // where stText was cut from its line: cutStart, cutEnd
	optSteps     int64    // total of the run's training bar ("Total optimization steps = N"), 0: unknown
	bareTrain    bool     // SpeechBrain's bare training bar was seen: a bare bar without its "train_loss=" is validation
	lastBare     int64    // total of the last unlabelled bar seen (0: none)
	lastBareLine int      // the line it was seen on
	optLearned   bool     // optSteps is the total of the bar a Hugging Face log dict was written under (no banner)
	marks        []PhaseMark
	marksDropped int
	last         [nSlots]place // the last position read, per kind of counter
	haveLast     [nSlots]bool
	ev           [nSlots]place // the last position sent in an EventStep, per kind

	// failures
	cur       *failure
	handled   []handledFailure
	notes     []failureNote // failures set aside as consequences of the verdict's, or replaced (first_failure.go)
	pend      pendingMsg
	block     rootCauseBlock
	lastFrame frameSeen // the last traceback frame line (site.go)
	srcAt     int       // the line a traceback frame's source line is expected on (traceback_phase.go), 0: none
	srcRank   int
	srcLib    bool // the frame is a framework's installed code
	abUntil   int  // AutoBatch probing: OOM text until this line is the probe's
	exp       expandableState
	exit      *Exit

	// trace, when set (tests), is called for every line recognised as a
	// phase line, with the phase the line shows.
	trace func(num int, p Phase)
}

// maxPhaseMarks bounds Verdict.Phases: the first half of the marks and the
// most recent ones are kept.
const maxPhaseMarks = 512

// maxText bounds Verdict.Text.
const maxText = 1000

// stepRead is a step the output showed, where it was read.
type stepRead struct {
	step, total int64 // -1: none
	epoch       int64 // the epoch in effect when it was read (a position within the epoch is one with it)
	kind        kindID
	line        int
}

var noStep = stepRead{step: -1, total: -1, epoch: -1}

// Positions are compared only with positions of the same kind of counter:
// the slots of Classifier.last and failure.base.
const (
	slotGlobal  = iota // a training step (StepGlobal)
	slotInEpoch        // a position within the epoch (StepInEpoch)
	slotOther          // another counter (a validation bar's) or an epoch alone
	nSlots
)

// place is a position read from a line; its slot says its kind.
type place struct{ step, total, epoch int64 }

var slotKinds = [nSlots]StepKind{slotGlobal: StepGlobal, slotInEpoch: StepInEpoch, slotOther: StepNone}

// advanced says whether p, read after q in the same slot, shows training
// further on. ok is false when the two cannot be compared (one shows an
// epoch, the other not).
func advanced(slot int, p, q place) (adv, ok bool) {
	if slot == slotOther {
		if p.epoch >= 0 && q.epoch >= 0 && p.epoch != q.epoch {
			return p.epoch > q.epoch, true
		}
		return p.step > q.step, true
	}
	k := slotKinds[slot]
	c, ok := Position{k, p.step, p.total, p.epoch}.Cmp(Position{k, q.step, q.total, q.epoch})
	return c > 0, ok
}

// failure is the classifier's current conclusion.
type failure struct {
	kind     Kind
	class    int // 3 memory, 2 specific crash, 1 generic crash
	reason   string
	family   string // message family: lines of one report share it
	line     int
	lastLine int // last line that refined it
	text     string
	rank     int
	host     string
	oom      *OOM
	extra    oomExtra
	detail   string // plain words about the evidence ("DataLoader worker pid 23310")
	lowConf  bool   // the evidence does not prove the cause
	shm      bool   // the memory that ran out is /dev/shm (Verdict.SharedMemory)
	site     string // the innermost traceback frame printed before a memory failure (Verdict.Site)
	phase    Phase
	st       stepRead
	stText   [maxStepText]byte // st's line (stLen bytes of it, cut as stCut says): no allocation per failure
	stLen    uint8
	stCut    uint8
	epoch    int64

	base    [nSlots]place // training position when the failure was seen, per kind of counter
	hasBase [nSlots]bool
	ticks   [nSlots]int // times the position advanced after the failure, per kind of counter
	adopt   int         // a phase line up to this line number may supply the phase

	allowTable int // "would exceed allowed memory": figures follow until this line

	wrapped string // an incomplete PyTorch OOM message, to be continued
	exc     string // for a Python exception line: the exception's type

	conseq   uint8 // what kind of consequence of another failure it is (first_failure.go), conseqNone for a cause
	caught   bool  // an OOM the framework says it caught and went on from
	emptyMsg bool  // an exception line with no message: it follows on the next lines
	worker   bool  // the memory was asked for inside a DataLoader worker (Verdict.Requester)
}

// handledFailure is a failure that training survived.
type handledFailure struct {
	kind   Kind
	reason string
	line   int
}

// pendingMsg is a PyTorch OOM message that may continue on the next lines
// (a hard-wrapped paste or terminal).
type pendingMsg struct {
	active bool
	rank   int
	lines  int
	buf    []byte
	f      *failure
	// head is the first line's text before the message (a logger's record
	// prefix, the exception's name), up to maxHead bytes: a continuation
	// record that starts with a prefix of the same shape has it removed
	// (message.go, repeatedPrefix).
	head    [maxHead]byte
	headLen int
}

const (
	maxPendingLines = 6
	maxPendingBytes = 4 << 10
)

// rootCauseBlock is torchrun's "Root Cause (first observed failure):" block.
type rootCauseBlock struct {
	active bool
	line   int
	rank   int
	host   string
}

// expandableState is what the log says about expandable_segments.
type expandableState struct {
	on, off, unsupported bool
}

// NewClassifier returns a Classifier. It fails when a phase pattern is not a
// valid regular expression or names a phase other than train or val; the
// error names the pattern.
func NewClassifier(o ClassifierOptions) (*Classifier, error) {
	user, err := compilePhasePatterns(o.PhasePatterns)
	if err != nil {
		return nil, err
	}
	c := &Classifier{
		opts: o, m: getKWMatcher(), user: user,
		valEpoch: -1, epoch: -1, st: noStep, stText: make([]byte, 0, maxStepText),
		tb: tbRecord{rank: -1},
	}
	for i := range c.ev {
		c.ev[i] = place{-1, -1, -1}
	}
	if bHas([]byte(o.AllocConf), "expandable_segments:True") || bHas([]byte(o.AllocConf), "expandable_segments:true") {
		c.exp.on = true
	}
	return c, nil
}

// ClassifyReader classifies a whole log: it splits r into lines the way the
// supervisor does (lines.Splitter) and returns the final Verdict. A read error
// is returned with the verdict on what was read before it.
func ClassifyReader(r io.Reader, o ClassifierOptions) (Verdict, error) {
	c, err := NewClassifier(o)
	if err != nil {
		return Verdict{}, err
	}
	s := lines.New(lines.DefaultMax, c.Line)
	_, err = io.Copy(s, r)
	s.Flush()
	if err != nil {
		return c.Verdict(), fmt.Errorf("reading the log: %w", err)
	}
	return c.Verdict(), nil
}

// Line reads one logical line (lines.Splitter's output). l.Text is only read
// during the call.
func (c *Classifier) Line(l lines.Line) {
	c.num = l.Num
	if l.CR && c.pend.active {
		c.pend = pendingMsg{} // a progress frame does not continue a message
	}
	rank, rest := splitPrefixes(l.Text)
	c.rank = rank
	c.m.scan(rest, &c.hits)
	if c.hits.has(kwOctalCR) || c.hits.has(kwOctalEsc) {
		c.octalFrames(rest, rank, l.Text)
		return
	}
	if (c.hits.has(kwEscNL) || len(rest) > 1 && rest[0] == '{' && rest[1] == '"') && c.escapedFrames(rest, rank) {
		return
	}
	c.frame(rest, rank, l.Text, true)
}

// octalFrames handles a line on which carriage returns and escapes were
// written as the literal text "#015" and "#033": it removes escape sequences
// and treats each carriage-return-separated frame as a line of its own.
func (c *Classifier) octalFrames(t []byte, rank int, full []byte) {
	c.buf = c.buf[:0]
	for i := 0; i < len(t); {
		if t[i] == '#' && i+3 < len(t) && t[i+1] == '0' {
			switch string(t[i+1 : i+4]) {
			case "015":
				c.buf = append(c.buf, '\r')
				i += 4
				continue
			case "033":
				i += 4
				if i < len(t) && t[i] == '[' {
					i = csiEnd(t, i)
				} else if i < len(t) {
					i++
				}
				continue
			}
		}
		c.buf = append(c.buf, t[i])
		i++
	}
	c.frames(c.buf, '\r', rank, full)
}

// csiEnd is the index just past the control sequence whose '[' is at t[i]:
// past its parameters and its final byte (0x40 to 0x7e), or len(t).
func csiEnd(t []byte, i int) int {
	i++
	for i < len(t) && !(t[i] >= 0x40 && t[i] <= 0x7e) {
		i++
	}
	if i < len(t) {
		i++
	}
	return i
}

// frames classifies each frame of buf that is not blank, split at sep: full
// is the line they came from, or nil for each frame to stand as its own line.
func (c *Classifier) frames(buf []byte, sep byte, rank int, full []byte) {
	for len(buf) > 0 {
		j := bytes.IndexByte(buf, sep)
		var fr []byte
		if j < 0 {
			fr, buf = buf, nil
		} else {
			fr, buf = buf[:j], buf[j+1:]
		}
		if len(trimSpace(fr)) > 0 {
			line := full
			if line == nil {
				line = fr
			}
			c.frame(fr, rank, line, false)
		}
	}
}

// frame classifies one frame of a line: t is its text after the prefixes.
// scanned says c.hits already holds the keywords of t.
func (c *Classifier) frame(t []byte, rank int, full []byte, scanned bool) {
	if c.pend.active {
		if c.continuePending(t, rank) {
			return
		}
		scanned = false // continuePending used c.hits
	}
	if c.block.active && c.rootCauseLine(t, full) {
		return
	}
	if f := c.cur; f != nil && f.allowTable >= c.num && f.oom != nil && parseAllowedTable(t, f.oom) {
		return // "Requested : 1.14 GiB" after "would exceed allowed memory"
	}
	if f := c.cur; f != nil && f.host == "" && f.rank >= 0 && len(t) > 0 && t[0] == 's' {
		srunTaskHost(t, f) // "srun: error: HOST: task N: Exited with exit code 1" names the failing rank's host
	}
	if !scanned {
		c.m.scan(t, &c.hits)
	}
	h := &c.hits
	if c.srcAt == c.num && rank == c.srcRank {
		c.srcAt = 0
		if len(t) > 0 && (t[0] == ' ' || t[0] == '\t') {
			if p := sourcePhase(t, c.srcLib); p != PhaseNone && !(p == PhaseTrain && c.phase == PhaseVal && !c.srcLib && runEntryCall(t)) {
				r := newPhaseHit(p)
				c.applyPhase(&r, t)
			}
		}
	}
	c.tb.line(c, t, rank, h.has(kwTraceback))
	if h.has(kwFrame) {
		c.lastFrame.note(t, c.num, rank)
		if bHasPrefix(trimSpaceLeft(t), "File \"") {
			c.srcAt, c.srcRank = c.num+1, rank
			c.srcLib = bHas(t, "-packages/")
		}
	}
	phaseShape, failShape := anchoredCandidate(t)
	if h.empty() && !phaseShape && !failShape && len(c.user) == 0 {
		return
	}
	// Phase first: a progress bar glued to an error shows the phase the
	// error happened in.
	c.detectPhaseLine(t, h, phaseShape)
	if h.any(&failureKeywords) || failShape {
		f, ok := c.detectFailure(t, h)
		if !ok && (h.has(kwOOM) || h.has(kwMemoryError)) {
			// A framework's word that it caught an OOM (first_failure.go).
			if h.has(kwMemoryError) {
				f, ok = fallbackOOM(t)
			} else {
				c.recoveryLine(t)
			}
		}
		if ok {
			c.record(f, rank, t, full)
			if cur := c.cur; cur != nil && cur.wrapped != "" {
				if cur.line == c.num {
					w := cur.wrapped[:min(len(cur.wrapped), maxPendingBytes-1)]
					c.pend = pendingMsg{active: true, rank: rank, buf: append(make([]byte, 0, 2*len(w)), w...), f: cur}
					if h := len(t) - len(cur.wrapped); h > 0 {
						c.pend.headLen = copy(c.pend.head[:], t[:h])
					}
				}
				cur.wrapped = ""
			}
		}
	}
}

// srunTaskHost takes the host of f's rank from srun's report of the task's
// end ("srun: error: gpu-07: task 3: Exited with exit code 1"), which
// follows a rank's failure when srun runs it with --label.
func srunTaskHost(t []byte, f *failure) {
	const prefix = "srun: error: "
	if !bHasPrefix(t, prefix) {
		return
	}
	rest := t[len(prefix):]
	i := bIndex(rest, ": task ")
	if i <= 0 || bytes.IndexByte(rest[:i], ' ') >= 0 {
		return
	}
	v, n, ok := scanInt(rest[i+len(": task "):])
	if !ok || int(v) != f.rank || !bHasPrefix(rest[i+len(": task ")+n:], ": ") {
		return
	}
	f.host = string(rest[:i])
}

// anchoredCandidate says whether a line without keywords may still matter
// for its shape at the start: a progress row starting with digits or a
// results row starting with "all" (phase), or a short line that may be a
// localized "Killed" (failure).
func anchoredCandidate(t []byte) (phase, fail bool) {
	tl := trimSpaceLeft(t)
	if len(tl) == 0 {
		return false, false
	}
	switch c := tl[0]; {
	case asciiDigit(c):
		return true, false
	case c == 'a':
		return bHasPrefix(tl, "all "), false
	case c == 'e':
		return bHasPrefix(tl, "eval"), false // Composer's evaluation bar, PaddleOCR's; "eval finished"
	case c == '|':
		return len(tl) > 2, false // a table row: "| eval  | 2 | 20/80 |" (progress_shape.go)
	case c == 'P' || c == 'p':
		return bHasPrefix(tl, "Predict") || bHasPrefix(tl, "predict"), false // Lightning's "Predicting DataLoader 0:" bar
	case c == 't':
		return bHasPrefix(tl, "test"), false // "test: 100%|" (progress_shape.go)
	case c == '=' || c == '*' || c == '#' || c == '-' || c == '>':
		return true, false // "=> Evaluating on test set", "***** eval metrics *****" (progress_shape.go)
	case c == 'v' || c == 'V':
		return bHasPrefix(tl, "val") || bHasPrefix(tl, "Val"), false // "val [10/25] loss=0.955" (progress_shape.go)
	case c == 'E':
		return bHasPrefix(tl, "Eval begin"), false // Paddle's Model.fit
	case c >= 0x80:
		if bHasPrefix(tl, "│") {
			return bHas(tl, ".py:"), false // a rich traceback's frame (traceback_phase.go)
		}
		return false, len(tl) <= 48
	case len(tl) <= 24:
		return false, localizedKilled[string(trimSpace(tl))]
	}
	return false, false
}

// detectPhaseLine runs the phase detectors and applies what they find.
func (c *Classifier) detectPhaseLine(t []byte, h *hitSet, anchored bool) {
	r := &c.ph
	ok := false
	if len(c.user) > 0 && !c.explicit {
		if p, m := matchUser(c.user, t); m {
			ok = true
			if detectPhase(t, h, r) {
				// Keep the counters a built-in detector reads.
				r.phase, r.done, r.combined, r.explicit = p, false, false, false
			} else {
				*r = newPhaseHit(p)
			}
		}
	}
	if !ok && (h.any(&phaseKeywords) || anchored) {
		ok = detectPhase(t, h, r)
	}
	if !ok && anchored {
		if cur, tot, okb := bareBar(trimSpaceLeft(t)); okb {
			if tt := trimSpace(t); tt[len(tt)-1] == ']' {
				c.lastBare, c.lastBareLine = tot, c.num // a bar frame, nothing glued to it
			}
			switch {
			case c.optSteps > 0 && tot == c.optSteps:
				// Hugging Face's and Accelerate's training bar has no label; its
				// total is the run's total optimization steps, and it counts them:
				// "  9%|█▏   | 2499/27650 [2:11:37<22:04:37,  3.16s/it]".
				*r = newPhaseHit(PhaseTrain) // redrawn when training goes on after an evaluation
				r.global(cur, tot)
				ok = true
			case c.optLearned:
				// Hugging Face without its banners (the default log level):
				// its evaluation bar is the other unlabelled bar.
				*r = newPhaseHit(PhaseVal)
				r.cur, r.tot, r.done = cur, tot, cur == tot
				ok = true
			case c.bareTrain && cur > 0:
				// SpeechBrain validates with a bare bar after its training bar
				// (whose postfix shows "train_loss="); a frame at 0 may be either.
				*r = newPhaseHit(PhaseVal)
				r.cur, r.tot, r.done = cur, tot, cur == tot
				ok = true
			}
		}
	}
	if !ok {
		return
	}
	c.applyPhase(r, t)
}

// applyPhase applies a phase detector's hit on the current line t: the
// phase it shows, the step and epoch it reads, and the progress it makes
// (which may show that a failure was survived).
func (c *Classifier) applyPhase(r *phaseHit, t []byte) {
	p := c.phaseOf(r)
	c.readStep(r, p, t)
	c.progress(r, p)
}

// phaseOf decides the phase the hit r puts the job in, records a change
// (a mark, an event) and returns it.
func (c *Classifier) phaseOf(r *phaseHit) Phase {
	if r.explicit {
		c.explicit = true
	}
	if r.bareTrain {
		c.bareTrain = true
	}
	p := r.phase
	if r.ends && c.sawTrain {
		p = PhaseTrain // a finished validation: training goes on
	}
	if r.follow && p == PhaseNone {
		p = c.phase // a bar both phases draw (Paddle's "step 10/938 - loss: ...")
	}
	if c.explicit && !r.explicit {
		p = c.phase // explicit markers rule; other lines only count steps
	}
	if r.combined && c.phase == PhaseVal && !c.valDone && (c.valEpoch < 0 || r.epoch < 0 || c.valEpoch == r.epoch) {
		// Lightning 1.x: the epoch bar also counts validation batches.
		p = PhaseVal
	}
	if p == PhaseTrain {
		c.sawTrain = true
	}
	if p != PhaseNone && p != c.phase {
		c.phase = p
		c.addMark(PhaseMark{Line: c.num, Phase: p})
		if p == PhaseVal {
			c.valDone = false
			c.valEpoch = c.epoch
			if r.epoch >= 0 {
				c.valEpoch = r.epoch
			}
		}
		c.emit(Event{Type: EventPhase, Line: c.num, Rank: c.rank, Phase: p})
	}
	if p == PhaseVal && r.done {
		c.valDone = true
	}
	if c.trace != nil && p != PhaseNone {
		c.trace(c.num, p)
	}
	return p
}

// readStep reads the hit's step, epoch and the optimization-step total.
func (c *Classifier) readStep(r *phaseHit, p Phase, t []byte) {
	if r.banner {
		c.optSteps = r.tot
	}
	if r.lossDict && c.optSteps == 0 && c.lastBare > 0 && c.lastBareLine >= c.num-1 {
		// Hugging Face writes its log dicts under its training bar
		// (tqdm.write clears the bar, prints, redraws it): an unlabelled
		// bar right before the dict is the training bar, which counts the
		// run's optimization steps.
		c.optSteps, c.optLearned = c.lastBare, true
	}
	if r.kind == kindGlobal && r.epoch >= 0 {
		// A counter printed with its epoch that restarts when the epoch
		// advances ("Epoch 1/3 step 490/500", then "Epoch 2/3 step
		// 10/500") counts the batches of the epoch, not the run's steps:
		// from then on such readings are positions within the epoch.
		if c.ge.seen && r.epoch > c.ge.epoch && r.step < c.ge.step {
			c.ge.resets = true
			if c.st.kind == kindGlobal && c.st.epoch >= 0 {
				c.st.kind = kindInEpoch
			}
		}
		c.ge.seen, c.ge.step, c.ge.epoch = true, r.step, r.epoch
		if c.ge.resets {
			r.kind = kindInEpoch
		}
	}
	if r.epoch >= 0 {
		c.epoch = r.epoch
	}
	// The step: a training step from any line (it is the same counter in
	// every phase: fairseq's num_updates on a validation line); a position
	// within the epoch only from a training line, and only as long as no
	// training step was seen: a bar's batch index does not replace the
	// training step beside it.
	switch {
	case r.kind == kindGlobal:
		c.setStep(r, t)
	case r.kind == kindInEpoch && p == PhaseTrain && c.st.kind != kindGlobal:
		c.setStep(r, t)
	}
}

// progress places the hit's reading in training, emits a step event for a
// new reading, and counts it for a failure already seen: training that
// goes on after a failure shows it was handled (tick).
func (c *Classifier) progress(r *phaseHit, p Phase) {
	// Progress: the position of this line in training, with its kind.
	slot, pos := -1, place{}
	switch {
	case r.kind == kindGlobal:
		slot, pos = slotGlobal, place{r.step, r.stepTot, c.epoch}
	case r.kind == kindInEpoch:
		slot, pos = slotInEpoch, place{r.step, r.stepTot, c.epoch}
	case r.cur >= 0 || r.epoch >= 0:
		slot, pos = slotOther, place{r.cur, r.tot, r.epoch}
	}
	if slot >= 0 && (p == PhaseTrain || r.kind == kindGlobal) && (r.step >= 0 || r.epoch >= 0) {
		// A step (or an epoch) printed: one event per new reading of each
		// kind, so that interleaved counters of two kinds all count.
		ev := place{r.step, -1, c.epoch}
		if r.kind == kindNone {
			ev.step = -1 // a line that shows the epoch alone
		}
		if e := &c.ev[slot]; e.step != ev.step || e.epoch != ev.epoch {
			*e = ev
			c.emit(Event{Type: EventStep, Line: c.num, Rank: c.rank, Step: ev.step, Epoch: ev.epoch, StepKind: stepKinds[r.kind]})
		}
	}
	if f := c.cur; f != nil && c.num > f.line {
		if f.phase == PhaseNone && c.num <= f.adopt && p != PhaseNone {
			f.phase = p
			if f.st.step < 0 && c.st.line == c.num {
				c.snapshotStep(f)
			}
			if f.epoch < 0 && r.epoch >= 0 {
				f.epoch = r.epoch
			}
		}
		// Another rank's progress does not show that the failing rank
		// went on: it may print steps it took before it hung.
		if slot >= 0 && !r.nan && (f.rank < 0 || c.rank < 0 || f.rank == c.rank) {
			c.tick(f, slot, pos)
		}
	}
	if slot >= 0 {
		c.last[slot], c.haveLast[slot] = pos, true
	}
}

// setStep makes the step of r, read from line t, the reported step. A
// reading that repeats the current one (a bar redrawn, the step printed
// again after validation) keeps the line where it was first read.
func (c *Classifier) setStep(r *phaseHit, t []byte) {
	st := stepRead{step: r.step, total: r.stepTot, epoch: c.epoch, kind: r.kind, line: c.num}
	if st.step == c.st.step && st.kind == c.st.kind && st.total == c.st.total && (st.kind == kindGlobal || st.epoch == c.st.epoch) {
		return
	}
	c.st = st
	t = trimSpace(t)
	c.stCut = 0
	if len(t) > maxStepText {
		var start int
		t, start = stepWindow(t, st.step)
		c.stCut = cutEnd
		if start > 0 {
			c.stCut |= cutStart
		}
	}
	c.stText = append(c.stText[:0], t...)
}

// Where a step line was cut (Classifier.stCut).
const (
	cutStart = 1 << iota
	cutEnd
)

// stepWindow is maxStepText bytes of a long line t, and where they start:
// its start, or, when the step's number is further on (a DeepSpeed line
// glued to a bar drawn across the terminal), the part that ends shortly
// after the number.
func stepWindow(t []byte, step int64) ([]byte, int) {
	var nb [20]byte
	num := strconv.AppendInt(nb[:0], step, 10)
	for off := 0; off < len(t); {
		i := bytes.Index(t[off:], num)
		if i < 0 {
			break
		}
		i += off
		end := i + len(num)
		off = end
		if i > 0 && asciiDigit(t[i-1]) || end < len(t) && asciiDigit(t[end]) {
			continue
		}
		if end+40 > maxStepText {
			start := min(end+40, len(t)) - maxStepText
			for start < len(t) && !utf8.RuneStart(t[start]) {
				start++
			}
			return t[start:min(start+maxStepText, len(t))], start
		}
		break
	}
	return t[:maxStepText], 0
}

// stepText is the text of a step line for the verdict: valid UTF-8, cut at
// a character boundary, "…" where it was cut.
func stepText(b []byte, cut uint8) string {
	s := string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
	room := maxStepText
	if cut&cutStart != 0 {
		room -= len("…")
	}
	if cut&cutEnd != 0 || len(s) > room {
		s = clipText(s, room-len("…")) + "…"
	}
	if cut&cutStart != 0 {
		s = "…" + s
	}
	return s
}

// tick counts the progress lines that follow a failure, comparing each
// position with the last one of the same kind. A counter that advances
// twice means training went on: the failure was handled. (A step line and a
// bar that each advance once are one step of training, not two.)
func (c *Classifier) tick(f *failure, slot int, pos place) {
	if !f.hasBase[slot] {
		f.base[slot], f.hasBase[slot] = pos, true
		return
	}
	adv, ok := advanced(slot, pos, f.base[slot])
	if !ok {
		f.base[slot] = pos // another kind of reading: start again from it
		return
	}
	if !adv {
		return
	}
	f.base[slot] = pos
	f.ticks[slot]++
	if f.ticks[slot] >= 2 || f.caught {
		if len(c.handled) < 4 {
			c.handled = append(c.handled, handledFailure{kind: f.kind, reason: f.reason, line: f.line})
		}
		c.cur = nil
		c.pend = pendingMsg{}
	}
}

func (c *Classifier) addMark(m PhaseMark) {
	if len(c.marks) < maxPhaseMarks {
		c.marks = append(c.marks, m)
		return
	}
	// Keep the first half; slide the second half.
	half := maxPhaseMarks / 2
	copy(c.marks[half:], c.marks[half+1:])
	c.marks[len(c.marks)-1] = m
	c.marksDropped++
}

func (c *Classifier) emit(e Event) {
	if c.opts.OnEvent != nil {
		c.opts.OnEvent(e)
	}
}

// record adopts a candidate failure found on the current line, or folds it
// into the current one, or sets it aside (first_failure.go has the rule).
func (c *Classifier) record(f failure, rank int, t, full []byte) {
	f.detail = clipText(f.detail, maxDetail)
	if f.rank < 0 {
		f.rank = rank
	}
	if f.rank < 0 {
		f.rank = rankInText(t)
	}
	if f.rank < 0 && c.tb.rank >= 0 {
		f.rank = c.tb.rank
	}
	if f.oom != nil && f.oom.Format == "caught" {
		f.caught = true
		caughtFigures(&f, t)
	}
	if f.class == classMemory && !f.caught && f.oom != nil && f.oom.Exception == "" && saysHandled(t) {
		// "[OOM] CUDA out of memory. Waiting 10 seconds and trying
		// again...": the program's own words, on the error's line, that it
		// goes on (first_failure.go).
		f.caught = true
	}
	classifyConsequence(&f, t)
	if f.class == classMemory && f.site == "" {
		f.site = c.lastFrame.before(c.num, f.rank)
	}
	if f.family == "dataloader" || bHas(t, "in DataLoader worker process") {
		f.worker = true
	}
	cur := c.cur
	if cur == nil {
		c.adopt(f, t, full)
		return
	}
	if supersedes(cur, &f) {
		if f.oom != nil && f.oom.Exception == "" && cur.exc != "" && c.num-cur.line <= 3 {
			// TensorFlow: "ResourceExhaustedError: 2 root error(s) found."
			// then "(0) Resource exhausted: OOM when allocating ...".
			f.oom.Exception = cur.exc
		}
		if f.class == classMemory && !f.worker && cur.worker && c.num-cur.lastLine <= 40 {
			// "RuntimeError: Caught RuntimeError in DataLoader worker
			// process 3." then the worker's own traceback, ending in the
			// allocator's error.
			f.worker = true
		}
		switch {
		case cur.caught:
			c.note(cur, noteCaught)
		case cur.conseq != conseqNone:
			c.note(cur, noteReplaced)
		}
		c.pend = pendingMsg{}
		c.adopt(f, t, full)
		return
	}
	if f.conseq != conseqNone && (cur.conseq == conseqNone || f.family != cur.family) {
		f.line = c.num
		c.note(&f, noteConsequence)
		return
	}
	if f.kind == cur.kind && c.num-cur.lastLine <= 30 && (f.rank < 0 || cur.rank < 0 || f.rank == cur.rank) {
		c.merge(cur, &f)
	}
}

func (c *Classifier) adopt(f failure, t, full []byte) {
	nf := f
	nf.line, nf.lastLine = c.num, c.num
	nf.text = boundedText(full, t)
	c.snapshot(&nf)
	nf.adopt = c.num + 5
	nf.base, nf.hasBase = c.last, c.haveLast
	if nf.allowTable > 0 {
		nf.allowTable = c.num + 8
	}
	c.cur = &nf
	if nf.caught {
		// The framework says it handled the OOM (fairseq: "ran out of
		// memory, skipping batch"): no live failure event, which would start
		// the supervisor's grace period on a job that goes on. The verdict
		// keeps it unless training continues after it.
		return
	}
	c.emit(Event{Type: EventFailure, Line: c.num, Rank: nf.rank, Kind: nf.kind, Text: nf.text})
}

// snapshot records in f where training is: the phase, the step and the
// epoch.
func (c *Classifier) snapshot(f *failure) {
	f.phase, f.epoch = c.phase, c.epoch
	if f.kind == KindHostOOM && f.phase == PhaseVal && c.valDone && c.sawTrain && !c.explicit {
		// A kill says nothing of where the job was. The validation had
		// shown its end (its bar at N/N, its results): training went on
		// after it, and the kill is training's. (A failure with a
		// traceback is placed by its frames, and may be the validation's
		// own end: its metrics.)
		f.phase = PhaseTrain
	}
	c.snapshotStep(f)
}

// snapshotStep records in f the current step and its line.
func (c *Classifier) snapshotStep(f *failure) {
	f.st = c.st
	f.stLen = uint8(copy(f.stText[:], c.stText))
	f.stCut = c.stCut
}

// merge folds a later line of the same report into the current failure:
// fields the first line did not show are taken from the later one.
func (c *Classifier) merge(cur, f *failure) {
	cur.lastLine = c.num
	if cur.rank < 0 {
		cur.rank = f.rank
	}
	if cur.host == "" {
		cur.host = f.host
	}
	if cur.detail == "" {
		cur.detail = f.detail
	} else if f.family != cur.family {
		addDetail(&cur.detail, f.detail)
	}
	if !f.lowConf {
		cur.lowConf = false
	}
	if cur.kind == KindHostOOM && messengerFamily(cur.family) && !messengerFamily(f.family) && f.class == classMemory {
		// "line 28:  8156 Killed  python3 main.py", then "slurmstepd:
		// error: Detected 1 oom-kill event(s)": a shell or an exit status
		// only passes on the signal; the killer's own report names who
		// killed the job and why, and so the remedy.
		cur.reason, cur.family = f.reason, f.family
	}
	if f.worker {
		cur.worker = true
	}
	if f.shm && !cur.shm {
		// "DataLoader worker exited unexpectedly", then the worker's own
		// word that shared memory ran out.
		cur.shm, cur.reason = true, f.reason
	}
	if f.oom != nil {
		if cur.oom == nil || cur.oom.Format == "caught_in_replica" && f.oom.Format != "caught_in_replica" {
			// DataParallel's "Caught OutOfMemoryError in replica 0 on
			// device 0.", then the replica's own message with its figures.
			if cur.oom != nil && f.oom.Device == nil {
				f.oom.Device = cur.oom.Device
			}
			cur.oom = f.oom
		} else if cur.oom.Format == f.oom.Format || cur.oom.Format == "nccl_cuda_oom" && f.oom.Format == "nccl_cuda_oom" {
			fillOOM(cur.oom, f.oom)
		}
	}
}

// fillOOM copies into dst the figures src has and dst lacks.
func fillOOM(dst, src *OOM) {
	set := func(d **int64, s *int64) {
		if *d == nil && s != nil {
			*d = s
		}
	}
	set(&dst.RequestedBytes, src.RequestedBytes)
	set(&dst.TotalBytes, src.TotalBytes)
	set(&dst.FreeBytes, src.FreeBytes)
	set(&dst.InUseBytes, src.InUseBytes)
	set(&dst.AllocatedBytes, src.AllocatedBytes)
	set(&dst.ReservedUnallocatedBytes, src.ReservedUnallocatedBytes)
	set(&dst.ReservedTotalBytes, src.ReservedTotalBytes)
	set(&dst.PrivatePoolsBytes, src.PrivatePoolsBytes)
	if dst.Device == nil {
		dst.Device = src.Device
	}
	if dst.Exception == "" {
		dst.Exception = src.Exception
	}
}

// maxDetail bounds a failure's detail (the evidence in plain words).
const maxDetail = 600

// addDetail appends s to the detail *d, keeping it within maxDetail.
func addDetail(d *string, s string) {
	if s == "" || len(*d) >= maxDetail {
		return
	}
	if *d != "" {
		s = "; " + s
	}
	*d += clipText(s, maxDetail-len(*d))
}

// clipText shortens s to at most n bytes, at a character boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// boundedText is the failure line for Verdict.Text: the whole line when it is
// short, else a window of it starting a little before the message. Invalid
// UTF-8 is replaced; the result is at most maxText bytes and a "…".
func boundedText(full, t []byte) string {
	s := bytes.ToValidUTF8(trimSpace(full), []byte("\uFFFD"))
	if len(s) <= maxText {
		return string(s)
	}
	w := bytes.ToValidUTF8(trimSpace(t), []byte("\uFFFD"))
	return "…" + clipText(string(w), maxText)
}

// continuePending appends a continuation line to a hard-wrapped OOM message.
// It returns false (and ends the pending state) when t is not one.
func (c *Classifier) continuePending(t []byte, rank int) bool {
	p := &c.pend
	if rank != p.rank && rank >= 0 && p.rank >= 0 && p.f == c.cur {
		// Another rank's line, interleaved: the message of this rank may
		// go on after it. Ranks are kept apart.
		return false
	}
	record := false // a record of its own: the logger split the message at a line break
	if p.f == c.cur && rank == p.rank {
		if k := repeatedPrefix(p.head[:p.headLen], t); k > 0 {
			t, record = t[k:], true
		}
	}
	if p.f != c.cur || rank != p.rank || p.lines >= maxPendingLines || !continuation(t) {
		c.pend = pendingMsg{}
		return false
	}
	c.m.scan(t, &c.hits)
	if detectPhase(t, &c.hits, &c.ph) {
		c.pend = pendingMsg{}
		return false
	}
	p.lines++
	if sep := sentenceBreak(p.buf, t); record && sep != "" && len(p.buf)+len(sep) <= maxPendingBytes {
		p.buf = append(bytes.TrimRight(p.buf, " \t"), sep...)
		t = trimSpaceLeft(t)
	} else if len(p.buf) > 0 && (record || p.buf[len(p.buf)-1] == ' ' || t[0] == ' ' || t[0] == '\t') {
		p.buf = bytes.TrimRight(p.buf, " \t")
		if len(p.buf) < maxPendingBytes {
			p.buf = append(p.buf, ' ')
		}
		t = trimSpaceLeft(t)
	} else if sep := sentenceBreak(p.buf, t); sep != "" && len(p.buf)+len(sep) <= maxPendingBytes {
		p.buf = append(p.buf, sep...)
	}
	room := max(maxPendingBytes-len(p.buf), 0)
	if len(t) > room {
		t = t[:room]
	}
	p.buf = append(p.buf, t...)
	o := p.f.oom
	keepExc := o.Exception
	*o = OOM{Exception: keepExc}
	p.f.extra = oomExtra{}
	complete := parseTorchOOM(p.buf, o, &p.f.extra)
	p.f.lastLine = c.num
	if complete || len(p.buf) >= maxPendingBytes {
		c.pend = pendingMsg{}
	}
	return true
}

// sentenceBreak is what a wrap at the end of a sentence of the message took
// away, when t starts the next sentence: PyTorch writes "Tried to allocate
// 300.00 MiB. GPU 3 has a total capacity of ...", and a post-mortem's paste
// breaks it as "Tried to allocate 300.00 MiB" / "GPU 3 has ..." (the period
// lost too) or "... MiB." / "GPU 3 ...". A wrap inside a word ("Mi" / "B.",
// "fr" / "ee.") continues in lower case and takes nothing.
func sentenceBreak(buf, t []byte) string {
	if len(buf) == 0 || len(t) == 0 || t[0] < 'A' || t[0] > 'Z' {
		return ""
	}
	switch last := buf[len(buf)-1]; {
	case last == '.' || last == ',' || last == ';':
		return " "
	case asciiLetter(last):
		if _, _, ok := memSizeBefore(buf, len(buf)); ok {
			return ". "
		}
	}
	return ""
}

// continuation says whether t may continue a wrapped message: not empty and
// not the start of a new record of a traceback or a log.
func continuation(t []byte) bool {
	tl := trimSpace(t)
	if len(tl) == 0 {
		return false
	}
	if tl[0] == '[' || tl[0] == '{' || tl[0] == '|' {
		return false // a log record, a dict log, a table
	}
	for _, p := range [...]string{"Traceback", "File \"", "During handling", "The above exception", "Exception raised from", "frame #", "ERROR:", "INFO:", "WARNING:", "Root Cause"} {
		if bHasPrefix(tl, p) {
			return false
		}
	}
	// A new Python exception line: "SomethingError: ..."
	if i := bytes.IndexByte(tl, ':'); i > 0 && i < 80 {
		name := tl[:i]
		if bytes.HasSuffix(name, []byte("Error")) || bytes.HasSuffix(name, []byte("Exception")) {
			return false
		}
	}
	return true
}

// rootCauseLine reads a line of torchrun's root-cause block. It returns true
// when the line belonged to the block.
func (c *Classifier) rootCauseLine(t, full []byte) bool {
	b := &c.block
	tl := trimSpace(t)
	if c.num-b.line > 12 || bHasPrefix(tl, "====") {
		c.block = rootCauseBlock{}
		return len(tl) > 0 && tl[0] == '='
	}
	key, val, ok := blockField(tl)
	if !ok {
		// "[2]:", the header of the entry
		if len(tl) > 3 && tl[0] == '[' && bytes.HasSuffix(tl, []byte("]:")) {
			_, n, ok := scanInt(tl[1:])
			return ok && n == len(tl)-3
		}
		return false
	}
	switch key {
	case "rank":
		if v, _, ok := scanInt(val); ok {
			b.rank = int(v)
		}
	case "host":
		b.host = string(val)
	case "exitcode":
		// The block names the host of the rank that failed first; when the
		// failure already read (an OOM the rank printed) is that rank's and
		// its line named no host, this is where the host comes from (srun
		// -N2 torchrun: srun's own line names the launcher's task, not the
		// rank).
		if c.cur != nil && c.cur.host == "" && b.host != "" && c.cur.rank == b.rank {
			c.cur.host = b.host
		}
		code, _, ok := scanInt(val)
		if !ok {
			return true
		}
		f := exitFailure(code, "torchrun")
		if f.kind == KindNone {
			return true
		}
		f.rank, f.host = b.rank, b.host
		f.detail = "torchrun's root cause: rank " + itoa(int64(b.rank)) + " exited with code " + itoa(code)
		if i := bIndex(val, "(pid: "); i >= 0 {
			f.detail += " (pid " + string(trimSpace(bytes.TrimSuffix(val[i+len("(pid: "):], []byte(")")))) + ")"
		}
		c.record(f, b.rank, t, full)
	case "traceback":
		if bHas(val, "SIGKILL") || bHas(val, "Signal 9 ") {
			if c.cur != nil && c.cur.kind == KindHostOOM && c.cur.family == "torchrun" {
				addDetail(&c.cur.detail, string(val))
			}
		}
	}
	return true
}

// blockField splits "key      : value".
func blockField(t []byte) (key string, val []byte, ok bool) {
	i := bytes.IndexByte(t, ':')
	if i <= 0 || i > 12 {
		return "", nil, false
	}
	k := trimSpace(t[:i])
	for _, s := range [...]string{"rank", "host", "exitcode", "traceback", "time", "error_file"} {
		if string(k) == s {
			return s, trimSpace(t[i+1:]), true
		}
	}
	return "", nil, false
}

// Exit tells the classifier how the job's process ended (live only). The
// Verdict uses it: a death by SIGKILL while the cgroup's OOM-kill counter
// rose is a host OOM even when the job printed nothing; a job that exited 0
// did not fail, whatever it printed.
func (c *Classifier) Exit(e Exit) {
	c.exit = &e
}

func itoa(v int64) string { return fmt.Sprint(v) }

// messengerFamily says whether a host kill's report only passes on the
// signal (a shell's "Killed", an exit status of 137, a DataLoader's word
// about its worker) rather than coming from the killer (the kernel, the
// memory cgroup, Slurm, a container runtime, Ray, Kubernetes).
func messengerFamily(f string) bool {
	return f == "shell" || f == "sigkill" || f == "dataloader"
}

// tbRecord follows a traceback that a logger wrote as one record: the
// record's prefix, on its first line only, names the rank ("[2025-03-25
// 08:14:02 TP3] Scheduler hit an exception: Traceback (most recent call
// last):"), and the lines that follow, unprefixed, are the rest of the
// record: the frames (indented), the chained-exception headers, and the
// exception's line, which ends it. A failure read on them has that rank.
type tbRecord struct {
	rank int  // the record's rank, -1: none
	end  bool // the exception's line was read: the next line is another record
}

func (r *tbRecord) line(c *Classifier, t []byte, rank int, start bool) {
	if start {
		r.rank, r.end = rank, false
		if r.rank < 0 {
			r.rank = engineRank(t)
		}
		return
	}
	if r.rank < 0 {
		return
	}
	if r.end || rank >= 0 {
		r.rank = -1 // another record
		return
	}
	if len(t) == 0 || t[0] == ' ' || t[0] == '\t' || bHasPrefix(t, "During handling") || bHasPrefix(t, "The above exception") {
		if len(t) == 0 {
			r.rank = -1
		}
		return
	}
	r.end = true // the exception's line: the last of the record
}
