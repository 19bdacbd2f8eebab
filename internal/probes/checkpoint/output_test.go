package checkpoint

import (
	"path/filepath"
	"strings"
	"testing"
)

func feed(o *Output, text string) {
	for _, ln := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		o.Line([]byte(ln))
	}
}

const pickleLoad = `Traceback (most recent call last):
  File "/home/u/train.py", line 88, in <module>
    main(args)
  File "/home/u/train.py", line 41, in main
    checkpoint = torch.load(args.resume, map_location="cpu", weights_only=False)
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 1470, in load
    return _legacy_load(
           ^^^^^^^^^^^^^
  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 1744, in _legacy_load
    magic_number = pickle_module.load(f, **pickle_load_args)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
_pickle.UnpicklingError: invalid load key, '\x00'.
`

const lightningZip = `[rank0]: Traceback (most recent call last):
[rank0]:   File "/w/fit.py", line 12, in <module>
[rank0]:     trainer.fit(model, ckpt_path="last")
[rank0]:   File "/venv/lib/python3.12/site-packages/lightning/pytorch/trainer/connectors/checkpoint_connector.py", line 90, in resume_start
[rank0]:     loaded_checkpoint = self.trainer.strategy.load_checkpoint(checkpoint_path)
[rank0]:   File "/venv/lib/python3.12/site-packages/torch/serialization.py", line 1040, in load
[rank0]:     with _open_zipfile_reader(opened_file) as opened_zipfile:
[rank0]: RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory
`

const stateDict = `Traceback (most recent call last):
  File "train.py", line 30, in <module>
    model.load_state_dict(ckpt["model"])
  File "/venv/lib/python3.10/site-packages/torch/nn/modules/module.py", line 2152, in load_state_dict
    raise RuntimeError('Error(s) in loading state_dict for {}:\n\t{}'.format(
RuntimeError: Error(s) in loading state_dict for ResNet:
`

const trainOOM = `Traceback (most recent call last):
  File "train.py", line 50, in <module>
    loss = model(x).sum()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
`

const loadOOM = `Traceback (most recent call last):
  File "train.py", line 41, in main
    checkpoint = torch.load(args.resume, map_location="cuda")
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB.
`

const chained = `Traceback (most recent call last):
  File "train.py", line 10, in resume
    state = torch.load(path)
EOFError: Ran out of input

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 40, in <module>
    resume(args.resume)
  File "train.py", line 12, in resume
    raise SystemError("cannot resume from " + path)
SystemError: cannot resume from ckpt/step_2.pt
`

func TestOutputLoadFailure(t *testing.T) {
	cases := []struct {
		name, log string
		want      bool
		frame     string // want
	}{
		{"torch.load in the user's code, pickle's error", pickleLoad, true, "torch.load in train.py"},
		{"Lightning's resume, a cut zip, rank prefixes", lightningZip, true, "load_checkpoint in checkpoint_connector.py"},
		{"load_state_dict refuses the weights", stateDict, true, "load_state_dict in train.py"},
		{"an OOM in training is no load failure", trainOOM, false, ""},
		{"an OOM while loading is an OOM, not a bad checkpoint", loadOOM, false, ""},
		{"a load failure the job went on after", pickleLoad + "step 10 loss 2.0\n", false, ""},
		{"a load failure, later another failure", pickleLoad + "starting from scratch\n" + trainOOM, false, ""},
		{"an exception raised while handling a failed load", chained, true, "torch.load in train.py"},
		{"a load error named without a load frame", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    restore()\nRuntimeError: PytorchStreamReader failed reading file data/0: invalid header or archive is corrupted\n", true, ""},
		{"no traceback: a message is no failure", "_pickle.UnpicklingError: invalid load key\n", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := NewOutput("/w")
			feed(o, "step 1 loss 3.0\n"+c.log)
			f, ok := o.LoadFailed()
			if ok != c.want || f.Frame != c.frame {
				t.Errorf("LoadFailed = %+v, %v; want %v, frame %q", f, ok, c.want, c.frame)
			}
			if ok && !strings.Contains(f.String(), "Error") {
				t.Errorf("String() = %q names no exception", f.String())
			}
		})
	}
}

func TestOutputSavedAndWentOn(t *testing.T) {
	o := NewOutput("/w")
	feed(o, `step 49 loss 2.0
saved checkpoint ckpt/step_50.pt
step 51 loss 1.9
Saving model checkpoint to out/checkpoint-500
Configuration saved in out/checkpoint-500/config.json
Model weights saved in out/checkpoint-500/model.safetensors
{'loss': 1.2, 'grad_norm': 3.1, 'learning_rate': 4e-05, 'epoch': 0.5}
Epoch 0, global step 50: 'val_loss' reached 0.50 (best 0.50), saving model to '/abs/lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt' as top 1
saved checkpoint ckpt/step_100.pt`)
	for _, c := range []struct {
		path string
		want bool
	}{
		{"/w/ckpt/step_50.pt", true},
		{"/w/out/checkpoint-500", true},                                          // the directory the save named
		{"/abs/lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt", true}, // went on: the next save line is other output
		{"/w/out/checkpoint-500/model.safetensors", true},                        // a file of the directory the save named
		{"/w/ckpt/step_100.pt", false},                                           // the last line: nothing after it
		{"/w/ckpt/step_75.pt", false},                                            // never announced
	} {
		save, next, ok := o.SavedAndWentOn(filepath.FromSlash(c.path))
		if ok != c.want {
			t.Errorf("%s: %v (%q, %q), want %v", c.path, ok, save, next, c.want)
		}
	}
	if _, next, _ := o.SavedAndWentOn("/w/out/checkpoint-500"); !strings.HasPrefix(next, "{'loss'") {
		t.Errorf("HF save went on at %q; want the loss line (the 'saved in' lines are still the save)", next)
	}
}

// The line reader's cost on the common line (a step), beside the job's
// output: go test -run '^$' -bench Output ./internal/probes/checkpoint/
func BenchmarkOutputStepLine(b *testing.B) {
	o := NewOutput("/w")
	line := []byte("Epoch: [3]  [ 120/5005]  eta: 0:41:30  lr: 0.1  img/s: 812.3  loss: 4.1273 (4.2351)  acc1: 12.5000 (10.9756)")
	b.ReportAllocs()
	for b.Loop() {
		o.Line(line)
	}
}
