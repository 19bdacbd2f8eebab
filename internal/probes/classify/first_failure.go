package classify

// The first failure and its consequences.
//
// In a job of several ranks (or several processes) one failure usually sets
// off others, and the log shows them all, interleaved, sometimes the
// consequence before the cause (another rank's buffered output, a watchdog
// that fires while the failing rank's traceback is still being written).
// The verdict names the cause. A failure is a consequence when it is what
// the other ranks print once one of them has failed or hung:
//
//   - collective: a collective timeout or abort (the NCCL watchdog's
//     "Watchdog caught collective operation timeout", "ProcessGroupNCCL's
//     watchdog got stuck", "NCCL communicator was aborted", an NCCL error
//     saying a remote process exited);
//   - peer: a connection to another rank broken (a broken pipe, a connection
//     reset or closed by the peer);
//   - teardown: a rank ended by the launcher (SIGTERM sent to the peers of a
//     failed rank, torchrun's SignalException, a DataLoader worker killed by
//     "Terminated");
//   - an absurd allocation (a petabyte or more, "more than 1EB memory"),
//     which ranks print after a collective failed: the failure is the
//     collective's, not an out-of-memory one.
//
// The rule (Classifier.supersedes):
//
//   - a consequence never replaces a cause seen earlier;
//   - a cause replaces a consequence seen earlier, when it names a cause: a
//     memory failure, a known crash, an exception; not an exit status, an
//     abort or a launcher's report, which every rank torn down prints;
//   - among consequences, a collective failure replaces a peer or teardown
//     one and an absurd allocation; otherwise the first stays;
//   - an absurd allocation with no collective failure around it is the
//     job's own failure (a size computed wrong), kept as causes are;
//   - between causes, the classes decide as before (a memory failure beats a
//     specific crash, which beats a generic one; else the first stays);
//     torchrun's ChildFailedError summary, which says only that a worker
//     failed, gives way to any failure and replaces none.
//
// The consequences set aside are kept (a few) and the diagnosis names them.
//
// Recovered out-of-memory errors. A framework that catches an OOM and goes
// on (fairseq's "attempting to recover from OOM", its "ran out of memory
// with exception", Ultralytics' "OutOfMemoryError in TaskAlignedAssigner,
// using CPU") prints the OOM without dying of it. Such an OOM is held as
// caught: any later failure that is not a consequence replaces it (the job
// died of something else, or of a later OOM), and one advance of the
// training counter after it makes it a note (training went on). A caught OOM
// the job never went on from stays the verdict.

import "bytes"

// Kinds of consequence (failure.conseq); higher replaces lower.
const (
	conseqNone = iota
	conseqTeardown
	conseqPeer
	conseqAbsurd
	conseqCollective
)

// maxNotes bounds the failures set aside that the diagnosis names.
const maxNotes = 4

// absurdBytes is the smallest request called absurd: a petabyte, beyond any
// machine's memory, printed after a collective failed.
const absurdBytes = 1 << 50

// classifyConsequence sets f.conseq from the failure's family and its line t.
func classifyConsequence(f *failure, t []byte) {
	switch f.family {
	case "nccl_timeout", "nccl_error":
		f.conseq = conseqCollective
		return
	}
	if f.kind == KindGPUOOM {
		if absurdRequest(f, t) {
			f.conseq = conseqAbsurd
		}
		return
	}
	if f.kind != KindCrash {
		return
	}
	switch {
	case bHas(t, "Broken pipe") || bHas(t, "BrokenPipeError") || bHas(t, "Connection reset by peer") ||
		bHas(t, "ConnectionResetError") || bHas(t, "Connection closed by peer") || bHas(t, "DistNetworkError"):
		f.conseq = conseqPeer
	case bHas(t, "SignalException") || bHas(t, "killed by signal: Terminated") || bHas(t, "got signal: 15") ||
		bHas(t, "(SIGTERM)") || bHas(t, "Signals.SIGTERM"):
		f.conseq = conseqTeardown
	}
}

// absurdRequest says whether the OOM on line t asked for a petabyte or more:
// PyTorch's "Tried to allocate more than 1EB memory", or a printed size that
// large (which the size parser may have refused as out of range).
func absurdRequest(f *failure, t []byte) bool {
	if f.oom != nil && f.oom.RequestedBytes != nil {
		return *f.oom.RequestedBytes >= absurdBytes
	}
	if bHas(t, "more than 1EB") {
		return true
	}
	i := bIndex(t, "allocate ")
	if i < 0 {
		return false
	}
	return bigSize(t[i+len("allocate "):]) >= absurdBytes
}

// bigSize reads "N[.D] UNIT" at the start of b as a float, without the
// range limit of parseMemSize; 0 when b does not start with a size.
func bigSize(b []byte) float64 {
	v, i, digits := 0.0, 0, 0
	for ; i < len(b) && (asciiDigit(b[i]) || b[i] == '.' && digits > 0); i++ {
		if b[i] == '.' {
			continue
		}
		v = v*10 + float64(b[i]-'0')
		digits++
	}
	if digits == 0 {
		return 0
	}
	if dot := bytes.IndexByte(b[:i], '.'); dot >= 0 {
		for k := dot + 1; k < i; k++ {
			v /= 10
		}
	}
	if i < len(b) && b[i] == ' ' {
		i++
	}
	mult, _ := memUnitMult(b[i:])
	if mult == 0 {
		switch {
		case bHasPrefix(b[i:], "EiB") || bHasPrefix(b[i:], "EB"):
			mult = 1 << 60
		default:
			return 0
		}
	}
	return v * float64(mult)
}

// causeAfterConsequence says whether f, seen after a consequence, names a
// cause: a memory failure (not an absurd one), or a crash that is not what
// every rank torn down prints (an exit status, an abort, a signal).
func causeAfterConsequence(f *failure) bool {
	if f.conseq != conseqNone {
		return false
	}
	if f.class == classMemory {
		return true
	}
	if f.class < classGeneric || f.lowConf {
		return false
	}
	switch f.family {
	case "exit", "torchrun", "abort", "dataloader", "slurm_cancelled", "sigkill", "shell":
		return false
	}
	return true
}

// supersedes says whether the candidate f replaces the current failure cur.
func supersedes(cur, f *failure) bool {
	switch {
	case cur.oom != nil && cur.oom.Format == "python_memory_error" && cur.emptyMsg && f.class == classMemory && f.oom != nil && f.kind != cur.kind:
		// "MemoryError: " with nothing after it: the exception's message
		// starts on the lines below (PaddlePaddle's BadAlloc begins with
		// blank lines, then "Out of memory error on GPU 0. ..."). The
		// message says which memory it was.
		return true
	case cur.class == classWrapper:
		// torchrun's ChildFailedError says only that a worker failed: any
		// failure says more.
		return f.class > classWrapper
	case cur.caught:
		// An OOM the framework caught: whatever the job died of later is
		// the verdict, unless it is a consequence (of that OOM, maybe).
		return f.conseq == conseqNone
	case f.conseq != conseqNone && cur.conseq == conseqNone:
		return false // a consequence of the cause already seen
	case cur.conseq == conseqAbsurd && f.conseq == conseqNone:
		// Alone, an absurd request is the job's own failure (a size
		// computed wrong): only a collective failure shows it was a
		// consequence.
		return f.class > cur.class
	case cur.conseq != conseqNone && f.conseq == conseqNone:
		return causeAfterConsequence(f)
	case cur.conseq != conseqNone && f.conseq != conseqNone:
		return f.conseq > cur.conseq
	}
	return f.class > cur.class
}

// note sets a failure aside for the diagnosis.
func (c *Classifier) note(f *failure, why noteWhy) {
	for _, n := range c.notes {
		if n.reason == f.reason && n.rank == f.rank {
			return // the same failure printed again (the watchdog's lines)
		}
	}
	if len(c.notes) >= maxNotes {
		return
	}
	c.notes = append(c.notes, failureNote{why: why, kind: f.kind, reason: f.reason, line: f.line, rank: f.rank})
}

// noteWhy is why a failure was set aside.
type noteWhy uint8

const (
	noteConsequence noteWhy = iota + 1 // it followed from the verdict's failure
	noteReplaced                       // a consequence, replaced by the cause seen after it
	noteCaught                         // an OOM the framework caught, replaced by a later failure
)

// failureNote is a failure set aside for the verdict's diagnosis.
type failureNote struct {
	why    noteWhy
	kind   Kind
	reason string
	line   int
	rank   int
}

// recoveryLine reads a line with no failure on it that says the framework
// recovered from the OOM just printed: fairseq's "attempting to recover from
// OOM" (fairseq2: "Attempting to recover from OOM on R3"). The current
// failure, an OOM of the same rank, becomes caught.
func (c *Classifier) recoveryLine(t []byte) {
	f := c.cur
	if f == nil || f.class != classMemory || c.num-f.lastLine > 40 || f.rank >= 0 && c.rank >= 0 && f.rank != c.rank {
		return
	}
	if bHas(t, "ttempting to recover from OOM") {
		if !f.caught {
			// The OOM's line went out as a live failure: say that the job
			// goes on, so that nobody stops it for that error.
			c.emit(Event{Type: EventRecovered, Line: c.num, Rank: f.rank})
		}
		f.caught = true
		f.lastLine = c.num
	}
}

// caughtFigures reads the figures of the PyTorch message a caught OOM line
// quotes (fairseq: "OOM: Ran out of memory with exception: CUDA out of
// memory. Tried to allocate 1.21 GiB (GPU 0; ...)"). The format stays
// "caught".
func caughtFigures(f *failure, t []byte) {
	o := f.oom
	if o == nil || o.RequestedBytes != nil {
		return
	}
	i := bIndex(t, "CUDA out of memory")
	if i < 0 {
		return
	}
	parseTorchOOM(t[i:], o, &f.extra)
	o.Format = "caught"
}

// fallbackOOM recognises an OOM the program says it caught and worked around
// on the same line: Ultralytics' "CUDA OutOfMemoryError in
// TaskAlignedAssigner, using CPU" (the assigner reruns on the CPU).
func fallbackOOM(t []byte) (failure, bool) {
	i := bIndex(t, "OutOfMemoryError in ")
	if i < 0 || !bHas(t[i:], ", using CPU") {
		return failure{}, false
	}
	f, o := gpuOOM(t, i, "caught")
	o.Exception = ""
	f.reason = "GPU out of memory (caught: the program fell back to the CPU)"
	f.caught = true
	return f, true
}

// noteWords says in sentences what the failures set aside were.
func noteWords(notes []failureNote) []string {
	var d, after []string
	for _, n := range notes {
		what := n.reason
		if n.rank >= 0 {
			what += " on rank " + itoa(int64(n.rank))
		}
		what += " (line " + itoa(int64(n.line)) + ")"
		switch n.why {
		case noteConsequence:
			after = append(after, what)
		case noteReplaced:
			d = append(d, sentence("the "+what+", printed before it, followed from it: it is not the cause"))
		case noteCaught:
			d = append(d, sentence("an out-of-memory error before it, "+what+", was caught by the program, which went on: it is not what the job died of"))
		}
	}
	if len(after) > 0 {
		s := "What was printed after it followed from it: "
		for i, a := range after {
			if i > 0 {
				s += "; "
			}
			s += a
		}
		d = append(d, s+".")
	}
	return d
}

// saysHandled reads, on an OOM line that raised nothing (no exception name
// before the message), the words a program uses when it catches the error
// and goes on: it skips the batch, retries or tries again, waits, lowers
// the batch size, or falls back. A raised exception's line never says so;
// its advice ("try setting max_split_size_mb") is no handling.
func saysHandled(t []byte) bool {
	for _, w := range handledWords {
		if indexFoldASCII(t, w) >= 0 {
			return true
		}
	}
	return false
}

var handledWords = [...]string{"skipping", "trying again", "retrying", "will retry", "retry with",
	"reducing batch", "reducing the batch", "halving", "falling back", "waiting "}
