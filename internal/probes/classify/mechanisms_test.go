package classify

import "testing"

// The helpers behind the mechanisms the held-out set measured
// (docs/classifier.md, "Reading logs it was not built from"), each with the
// look-alike it must leave alone.

func TestKeyValue(t *testing.T) {
	for s, want := range map[string]bool{
		" loss=2.31 lr=3e-4":           true,
		" epoch_3 acc=0.91":            true,
		" session starts ============": false, // a rule
		" == done ==":                  false,
		" a = b":                       false, // prose, spaced
	} {
		if got := keyValue([]byte(s)); got != want {
			t.Errorf("keyValue(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestBarlessPercent(t *testing.T) {
	for s, want := range map[string]bool{
		"0/10 * Epoch (valid):   3% 1/32 [00:01<00:46,  1.50s/it]": true,
		"Eval epoch 1:  20% 20/100 [00:03<00:12,  6.41it/s]":       true,
		"accuracy 93% of 1000 images":                              false,
		"GPU util 95% 3/4 GPUs busy":                               false, // no " [" after the counter
	} {
		if got := barlessPercent([]byte(s)) >= 0; got != want {
			t.Errorf("barlessPercent(%q) found = %v, want %v", s, got, want)
		}
	}
}

func TestAfterBar(t *testing.T) {
	l := []byte(" 58%|█████▊    | 16500/28347 [24:16<16:33, 11.93it/s]{'loss': 0.7283}")
	if !afterBar(l, len(l)-len("{'loss': 0.7283}")) {
		t.Error("a dict glued after a bar's r_bar was not seen as glued")
	}
	p := []byte("[INFO] {'loss': 0.7283}")
	if afterBar(p, len("[INFO] ")) {
		t.Error("a dict after a logger's prefix was seen as glued to a bar")
	}
}

func TestRichFrame(t *testing.T) {
	for s, want := range map[string]Phase{
		"│ /home/u/train_unet.py:212 in train_one_epoch          │":                        PhaseTrain,
		"│ /opt/app/run.py:88 in evaluate_model │":                                         PhaseVal,
		"│ /usr/lib/python3/dist-packages/torch/nn/modules/module.py:1532 in _call_impl │": PhaseNone,
		"│ ❱  88 │   │   out = evaluate(model)   │":                                        PhaseNone, // a source line, not a frame
	} {
		var r phaseHit
		got := PhaseNone
		if richFrame([]byte(s), &r) {
			got = r.phase
		}
		if got != want {
			t.Errorf("richFrame(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestRunEntryCall(t *testing.T) {
	for s, want := range map[string]bool{
		"    runner.train(model=model, loaders=loaders)": true,
		"    learner.fit(train_dl, val_dl, epochs=5)":    true,
		"    loss.backward()":                            false,
		"    train_one_epoch(model, loader)":             false,
	} {
		if got := runEntryCall([]byte(s)); got != want {
			t.Errorf("runEntryCall(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestSaysHandled(t *testing.T) {
	for s, want := range map[string]bool{
		"[OOM] CUDA out of memory. Waiting 10 seconds and trying again...":                                                        true,
		"CUDA out of memory at update 411; halving the micro-batch to 4":                                                          true,
		"| WARNING | OOM: Ran out of memory, skipping batch":                                                                      true,
		"CUDA out of memory. Tried to allocate 2.00 GiB. If reserved memory is >> allocated memory try setting max_split_size_mb": false,
	} {
		if got := saysHandled([]byte(s)); got != want {
			t.Errorf("saysHandled(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestJSONMultiline(t *testing.T) {
	rec := []byte(`{"msg": "unhandled error", "level": "error", "stack": "Traceback\n  File \"x.py\"\nRuntimeError: boom"}`)
	m := jsonMessage(rec)
	if got := string(jsonMultiline(rec, m)); got != `Traceback\n  File \"x.py\"\nRuntimeError: boom` {
		t.Errorf("jsonMultiline = %q", got)
	}
	one := []byte(`{"msg": "step 10\nstep 11", "level": "info"}`)
	if got := jsonMultiline(one, jsonMessage(one)); got != nil {
		t.Errorf("the message itself was read again as a multi-line field: %q", got)
	}
	if got := jsonMultiline([]byte(`{"msg": "ok", "level": "info"}`), []byte("ok")); got != nil {
		t.Errorf("a record without a multi-line field gave %q", got)
	}
}

func TestMessengerFamily(t *testing.T) {
	for _, f := range []string{"shell", "sigkill", "dataloader"} {
		if !messengerFamily(f) {
			t.Errorf("%s passes the signal on and should give way to the killer's report", f)
		}
	}
	for _, f := range []string{"slurm", "kernel", "cgroup", "container", "ray", "k8s_eviction"} {
		if messengerFamily(f) {
			t.Errorf("%s is a killer's own report", f)
		}
	}
}
