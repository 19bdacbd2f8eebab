package classify

// Training steps.
//
// The step that counts for progress is the job's training step: a global
// step, an iteration, an optimizer update, counted over the whole run
// (StepGlobal). Frameworks print it as a named field: "global_step=496",
// fairseq's "num_updates=847", "step 120/500", "[train] step 10",
// Megatron's "iteration      100/  500000 |", DeepSpeed's "step=120,
// skipped=5", litgpt's "iter 142 step 142", Lightning's "Epoch 0, global
// step 499:". A progress bar's position within an epoch (Lightning's "Epoch
// 3: ... 29/50", Keras, Ultralytics, "Epoch [e][i/N]") is not a training
// step: it starts again at each epoch, and it counts batches, whose number
// changes with the batch size. It is kept (StepInEpoch) only when the output
// shows nothing better, and then only means something with the epoch.

// Names of a training-step field, least specific first: a line that shows
// several ("iter 142 step 142", "iteration 496/1999 | global_step: 496") is
// read by the most specific.
const (
	keyNone       = iota
	keyIter       // iter, iteration
	keyStep       // step
	keyNumUpdates // fairseq's num_updates
	keyGlobalStep // global_step, "global step"
)

// maxStepText bounds Verdict.StepText.
const maxStepText = 200

// fieldStart says whether the byte before a field's name (c) leaves the name a
// word of its own: "50ms/step", "train_step_timing", "optimizer.step",
// "epoch=3-step=1200.ckpt" and "timestep" are not step fields.
func fieldStart(c byte) bool {
	return !(asciiLetter(c) || asciiDigit(c) || c == '_' || c == '-' || c == '/' || c == '.' || c == '=')
}

// fieldEnd says whether the byte after a field's name (c) ends the name:
// "steps", "step_loss", "iterations", "iter_num" are other names.
func fieldEnd(c byte) bool {
	return !(asciiLetter(c) || asciiDigit(c) || c == '_' || c == '-')
}

// fieldValue reads the value after a field's name: a closing quote (a dict
// key), then at least one separator (spaces, '=' or ':'), then an integer,
// and "/M" after it. "step120" and "global_step1000" (a checkpoint's name)
// have no separator; "step 4242.0" (Slurm's job step) and "step 2.5" are not
// counters, except that zeroFrac accepts the "794.0" of a counter logged as
// a float (Lightning's progress bar metrics). tot is -1 when no "/M"
// follows.
func fieldValue(r []byte, zeroFrac bool) (v, tot int64, ok bool) {
	j := 0
	if j < len(r) && (r[j] == '\'' || r[j] == '"') {
		j++
	}
	k := j
	for k < len(r) && (r[k] == ' ' || r[k] == '\t') {
		k++
	}
	if k < len(r) && (r[k] == '=' || r[k] == ':') {
		k++
		for k < len(r) && (r[k] == ' ' || r[k] == '\t') {
			k++
		}
	}
	if k == j || k >= len(r) || !asciiDigit(r[k]) {
		return -1, -1, false
	}
	v, n, ok := scanInt(r[k:])
	if !ok {
		return -1, -1, false
	}
	e := k + n
	if e < len(r) && r[e] == '.' && e+1 < len(r) && asciiDigit(r[e+1]) {
		if !zeroFrac {
			return -1, -1, false
		}
		e++
		for e < len(r) && r[e] == '0' {
			e++
		}
		if e < len(r) && (asciiDigit(r[e]) || r[e]|0x20 == 'e') {
			return -1, -1, false // 794.5, 1.23e+05: not a count
		}
	}
	if e < len(r) && (asciiLetter(r[e]) || r[e] == '_') {
		return -1, -1, false
	}
	tot = -1
	m := e
	for m < len(r) && r[m] == ' ' {
		m++
	}
	if m < len(r) && r[m] == '/' {
		m++
		for m < len(r) && r[m] == ' ' {
			m++
		}
		if m < len(r) && asciiDigit(r[m]) {
			if t, _, ok := scanInt(r[m:]); ok {
				tot = t
			}
		}
	}
	return v, tot, true
}

// namedStep reads the job's training step from a named field anywhere in b
// (see the key constants for the names and their order). It returns the
// value, the M of "N/M" after it (-1: none) and which name it read
// (keyNone: none). h is the prefilter's keywords of the line b is part of:
// a name it did not find is not looked for.
func namedStep(b []byte, h *hitSet) (v, tot int64, key int) {
	v, tot = -1, -1
	take := func(k int, val, t int64) {
		if k > key {
			v, tot, key = val, t, k
		}
	}
	// step, global_step, "global step"
	for off := 0; h.has(kwStep) && off < len(b); {
		i := indexFoldASCII(b[off:], "step")
		if i < 0 {
			break
		}
		i += off
		off = i + 4
		if off < len(b) && !fieldEnd(b[off]) {
			continue
		}
		if i >= 7 && (eqFoldASCII(b[i-7:i], "global_") || eqFoldASCII(b[i-7:i], "global ")) &&
			(i == 7 || !(asciiLetter(b[i-8]) || asciiDigit(b[i-8]) || b[i-8] == '_')) {
			if val, t, ok := fieldValue(b[off:], true); ok {
				take(keyGlobalStep, val, t)
			}
			continue
		}
		if key >= keyStep || i > 0 && !fieldStart(b[i-1]) {
			continue
		}
		if val, t, ok := fieldValue(b[off:], false); ok {
			take(keyStep, val, t)
		}
	}
	if key < keyNumUpdates && h.has(kwNumUpdates) {
		if i := bIndex(b, "num_updates"); i >= 0 && (i == 0 || fieldStart(b[i-1])) {
			if val, t, ok := fieldValue(b[i+len("num_updates"):], false); ok {
				take(keyNumUpdates, val, t)
			}
		}
	}
	if key < keyIter && h.has(kwUpdate) {
		// "update 1100": an optimizer update, the third name of a training
		// step (seamless_communication, OpenNMT-style loops). Read as
		// the least specific name; "updates" is another word.
		if i := indexFoldASCII(b, "update "); i >= 0 && (i == 0 || fieldStart(b[i-1])) {
			if val, t, ok := fieldValue(b[i+len("update"):], false); ok {
				take(keyIter, val, t)
			}
		}
	}
	if key >= keyIter || !h.has(kwIter) {
		return v, tot, key
	}
	// iter, iteration
	for off := 0; off < len(b); {
		i := indexFoldASCII(b[off:], "iter")
		if i < 0 {
			break
		}
		i += off
		off = i + 4
		if off+5 <= len(b) && eqFoldASCII(b[off:off+5], "ation") {
			off += 5
		}
		if off < len(b) && !fieldEnd(b[off]) || i > 0 && !fieldStart(b[i-1]) {
			continue
		}
		if val, t, ok := fieldValue(b[off:], false); ok {
			take(keyIter, val, t)
			break
		}
	}
	return v, tot, key
}

// globalField reads a field that can only be a global step: global_step,
// "global step", num_updates.
func globalField(b []byte, h *hitSet) (int64, bool) {
	v, _, key := namedStep(b, h)
	return v, key >= keyNumUpdates
}

// namedEpoch reads an integer "epoch N", "Epoch: N", "epoch=N" field, or -1
// ("'epoch': 0.53", Hugging Face's fraction, is not one).
func namedEpoch(b []byte, h *hitSet) int64 {
	for off := 0; h.has(kwEpoch) && off < len(b); {
		i := indexFoldASCII(b[off:], "epoch")
		if i < 0 {
			return -1
		}
		i += off
		off = i + 5
		if off < len(b) && !fieldEnd(b[off]) || i > 0 && !fieldStart(b[i-1]) {
			continue
		}
		if v, _, ok := fieldValue(b[off:], false); ok {
			return v
		}
		if r := b[off:]; bHasPrefix(r, ": [") && len(r) > 3 && asciiDigit(r[3]) {
			// PaddleOCR's "epoch: [2/500], global_step: 240"
			if v, n, ok := scanInt(r[3:]); ok && 3+n < len(r) && r[3+n] == '/' {
				return v
			}
		}
	}
	return -1
}

// lossNumber says whether b reports a loss value: "loss=2.31", "loss: 0.5",
// "'loss': 4.9", "lm loss: 7.1E+00", "loss train: 2.417", "loss: nan" (a
// loss key, up to a few letters of a qualifier, separators, then a number,
// nan or inf). "'loss_type': 'ce'" in a config is not one.
func lossNumber(b []byte) bool {
	for off := 0; off < len(b); {
		i := indexFoldASCII(b[off:], "loss")
		if i < 0 {
			return false
		}
		i += off
		off = i + 4
		j := off
		for j < len(b) && j-off < 12 && (asciiLetter(b[j]) || b[j] == '_' || b[j] == ' ') {
			j++
		}
		if q := trimSpace(b[off:j]); len(q) >= 3 && (eqFoldASCII(q[len(q)-3:], "nan") || eqFoldASCII(q[len(q)-3:], "inf")) {
			return true // "loss nan", "loss is nan"
		}
		for j < len(b) && (b[j] == '\'' || b[j] == '"' || b[j] == '=' || b[j] == ':' || b[j] == ' ') {
			j++
		}
		switch {
		case j < len(b) && asciiDigit(b[j]),
			j+1 < len(b) && b[j] == '-' && asciiDigit(b[j+1]),
			j+3 <= len(b) && (eqFoldASCII(b[j:j+3], "nan") || eqFoldASCII(b[j:j+3], "inf")):
			return true
		}
	}
	return false
}

// mentionsEval says whether b names a validation or a test ("val_loss",
// "eval loss", "validation loss at iteration 100", "test acc"): a step line
// that does is not a training line, though its step is the training step.
// "interval" and "value" are not such names.
func mentionsEval(b []byte) bool {
	for _, w := range [...]struct{ word, more string }{{"val", "id"}, {"eval", "uat"}, {"test", ""}} {
		for off := 0; off < len(b); {
			i := indexFoldASCII(b[off:], w.word)
			if i < 0 {
				break
			}
			i += off
			off = i + len(w.word)
			if i > 0 && asciiLetter(b[i-1]) {
				continue
			}
			if off == len(b) || !asciiLetter(b[off]) ||
				w.more != "" && off+len(w.more) <= len(b) && eqFoldASCII(b[off:off+len(w.more)], w.more) {
				return true
			}
		}
	}
	return false
}

// bareBar reads an unlabelled tqdm bar, "  9%|█▏   | 2499/27650 [2:11:37<22:04:37,
// 3.16s/it]" (tl without leading spaces): its counter.
func bareBar(tl []byte) (cur, tot int64, ok bool) {
	_, n, okp := scanInt(tl)
	if !okp || !asciiDigit(tl[0]) || n+1 >= len(tl) || tl[n] != '%' || tl[n+1] != '|' {
		return -1, -1, false
	}
	rest := tl[n+2:]
	j := 0
	for j < len(rest) && rest[j] != '|' {
		j++
	}
	if j == len(rest) {
		return -1, -1, false
	}
	return barCounter(rest, j+1)
}

// optimizationSteps reads Hugging Face's and Accelerate's banner line "Total
// optimization steps = 12,304": the total of the run's training bar.
// h is the prefilter's keywords of t: the banner's "steps" is the line's
// first "step".
func optimizationSteps(t []byte, h *hitSet) (int64, bool) {
	const banner = "Total optimization steps"
	i := h.at(kwStep) - len("Total optimization ")
	if !h.has(kwStep) || i < 0 || !bHasPrefix(t[i:], banner) {
		return -1, false
	}
	r := trimSpaceLeft(t[i+len(banner):])
	if len(r) == 0 || r[0] != '=' {
		return -1, false
	}
	r = trimSpaceLeft(r[1:])
	var v int64
	n := 0
	for ; n < len(r) && (asciiDigit(r[n]) || r[n] == ',' && n > 0); n++ {
		if r[n] == ',' {
			continue
		}
		if v > 1<<50 {
			return -1, false
		}
		v = v*10 + int64(r[n]-'0')
	}
	if n == 0 || v <= 0 {
		return -1, false
	}
	return v, true
}
