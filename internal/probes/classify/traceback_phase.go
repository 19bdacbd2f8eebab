package classify

import "bytes"

// Phase from a traceback's structure.
//
// A Python traceback lists the calls that led to the error, outermost
// first: for each, a frame line (`File "PATH", line N, in FUNC`) and, when
// the source is available, the line of code it was running. Every framework
// trains and validates in functions whose names and modules say so, and a
// job's own code calls them with words that say so too. Each call is
// read for the phase it runs in:
//
//   - its function's name, split into words at underscores: a training word
//     (train, training, backward, optimizer, optimize; fit in a framework's
//     installed code only) or a validation word (eval, evaluate,
//     evaluation, validate, validation, valid, val, predict, prediction,
//     test, testing, sanity; not inference: a stand-alone inference script
//     is no validation); forward with backward is a schedule both phases
//     run (Megatron-LM's forward_backward_no_pipelining) and tells nothing; a
//     validation word wins over a training word in one name
//     (`_maybe_log_save_evaluate`, `train_and_evaluate`: the inner frames
//     decide). Names that only prepare or check (a word among create,
//     build, get, make, load, init, setup, configure, check, is, config,
//     args, parse, schema) say nothing: `configure_optimizers`,
//     `validate_config`;
//   - its module's file: a framework's training loop (`fit_loop.py`,
//     `training_epoch_loop.py`, `training_batch_loop.py`, any file under a
//     `/optim/` package: an optimizer's `step`) or its evaluation and
//     prediction loops (`evaluation_loop.py`, `prediction_loop.py`);
//   - the source line printed under the frame: `.backward(`, an
//     optimizer's or grad scaler's `.step(`, `.train(`, `.fit(` mean
//     training; `.evaluate(`, `.validate(`, `.predict(`, `.test(` mean
//     validation.
//
// The innermost call that tells wins (it is printed last: each telling line
// is a phase line). Calls that tell nothing (a model's `forward`, `main`,
// `_call_impl`) leave the phase as the outer ones set it, so a teacher
// model's forward inside a training step stays training.

// framePhase is the phase a frame's function name and file tell, or
// PhaseNone.
func framePhase(path, name []byte) Phase {
	lib := bHas(path, "-packages/") // site-packages, dist-packages: a framework's code
	if p := nameWordsPhase(name, lib); p != PhaseNone {
		return p
	}
	base := path
	if i := lastByte(path, '/'); i >= 0 {
		base = path[i+1:]
	}
	switch string(base) {
	case "fit_loop.py", "training_epoch_loop.py", "training_batch_loop.py", "optimizer_loop.py", "fit_batch_loop.py":
		return PhaseTrain
	case "evaluation_loop.py", "prediction_loop.py", "evaluation_epoch_loop.py", "prediction_epoch_loop.py":
		return PhaseVal
	}
	if bHas(path, "/optim/") {
		return PhaseTrain // torch/optim/adam.py in step: an optimizer step
	}
	return PhaseNone
}

// nameWordsPhase reads a function name's words. lib says the function is
// a framework's (installed) code: only there does "fit" name the training
// loop (Keras', Lightning's); a job's own `fit` may be a command that
// starts anything.
func nameWordsPhase(name []byte, lib bool) Phase {
	train, val, fwd, bwd := false, false, false, false
	for len(name) > 0 {
		i := 0
		for i < len(name) && name[i] != '_' {
			i++
		}
		w := name[:i]
		if i < len(name) {
			name = name[i+1:]
		} else {
			name = nil
		}
		if len(w) == 0 || len(w) > 12 {
			continue
		}
		var lw [12]byte
		for k := range w {
			c := w[k]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			lw[k] = c
		}
		switch string(lw[:len(w)]) {
		case "fit":
			train = train || lib
		case "forward":
			fwd = true
		case "backward":
			bwd, train = true, true
		case "train", "training", "optimizer", "optimize", "finetune", "tune", "pretrain":
			train = true
		case "eval", "evaluate", "evaluation", "validate", "validation", "valid", "val",
			"predict", "prediction", "test", "testing", "sanity":
			val = true
		case "create", "build", "get", "make", "load", "init", "setup", "configure",
			"check", "is", "config", "args", "parse", "schema":
			return PhaseNone
		}
	}
	if fwd && bwd && !val {
		// Megatron-LM's forward_backward_no_pipelining runs evaluation too
		// (forward_only): a schedule of both phases tells nothing.
		return PhaseNone
	}
	switch {
	case val:
		return PhaseVal
	case train:
		return PhaseTrain
	}
	return PhaseNone
}

// sourcePhase is the phase the source line under a frame tells: the calls
// it was making, read like a frame's function (their names' words:
// `.fit_one_cycle(`, `run_valid(`), and an optimizer's or grad scaler's
// `.step(`. Calls are read left to right and the first that tells wins (a
// statement's own call comes first: `loss = train_step(model, evaluate(x))`).
// lib says the frame is a framework's installed code (see nameWordsPhase).
func sourcePhase(src []byte, lib bool) Phase {
	for i := 0; i+1 < len(src); i++ {
		if src[i] != '(' || i == 0 {
			continue
		}
		j := i
		for j > 0 && (asciiLetter(src[j-1]) || asciiDigit(src[j-1]) || src[j-1] == '_') {
			j--
		}
		if j == i {
			continue
		}
		name := src[j:i]
		if string(name) == "step" && j > 0 && src[j-1] == '.' {
			continue // below
		}
		if p := nameWordsPhase(name, lib); p != PhaseNone {
			return p
		}
	}
	for i := 0; i+1 < len(src); i++ {
		if src[i] != '.' {
			continue
		}
		rest := src[i+1:]
		switch {
		case bHasPrefix(rest, "step("):
			// optimizer.step(), opt.step(), self.scaler.step(optimizer)
			j := i
			for j > 0 && (asciiLetter(src[j-1]) || asciiDigit(src[j-1]) || src[j-1] == '_') {
				j--
			}
			recv := src[j:i]
			if bHas(recv, "optim") || bHas(recv, "opt") || bHas(recv, "scaler") {
				return PhaseTrain
			}
		}
	}
	return PhaseNone
}

func lastByte(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// richFrame reads a frame of a traceback that rich (and the loggers built on
// it: Hugging Face's, Typer's) draws in a box: "│ /home/u/train.py:212 in
// train_one_epoch │", its path, line number and function between the box's
// borders. The same reading as a plain frame's (tracebackFrame).
func richFrame(tl []byte, r *phaseHit) bool {
	tl = trimSpace(tl[len("│"):])
	if i := bIndex(tl, "│"); i >= 0 {
		tl = trimSpace(tl[:i])
	}
	p := bIndex(tl, ".py:")
	if p < 0 {
		return false
	}
	rest := tl[p+len(".py:"):]
	_, n, ok := scanInt(rest)
	if !ok || n == 0 || !bHasPrefix(rest[n:], " in ") {
		return false
	}
	name := trimSpace(rest[n+len(" in "):])
	if len(name) == 0 || bytes.IndexByte(name, ' ') >= 0 {
		return false
	}
	path := tl[:p+len(".py")]
	if k := lastByte(path, ' '); k >= 0 {
		path = path[k+1:]
	}
	return frameNamePhase(path, name, r)
}

// runEntryCall says whether the job's source line calls a whole run's entry
// point: a method named only train or fit (`runner.train(model=...)`,
// `trainer.fit(model)`), which runs validation too. Such a line, at the top
// of a traceback that shows no deeper frame, says the run was training or
// validating: it does not take a validation that progress lines showed
// running back to training.
func runEntryCall(src []byte) bool {
	for _, n := range [...]string{".train(", ".fit("} {
		if bIndex(src, n) >= 0 {
			return true
		}
	}
	return false
}
