package classify

import (
	"strings"
	"testing"
)

const tbOOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 1.50 GiB is free.\n"

// frames builds a traceback from (file, function, source) triples, outermost
// first, ending in the OOM.
func frames(fs ...[3]string) string {
	var b strings.Builder
	b.WriteString("Traceback (most recent call last):\n")
	for _, f := range fs {
		b.WriteString(`  File "` + f[0] + `", line 10, in ` + f[1] + "\n")
		if f[2] != "" {
			b.WriteString("    " + f[2] + "\n")
		}
	}
	return b.String() + tbOOM
}

const sp = "/venv/lib/python3.11/site-packages/"

// The phase a traceback's structure tells, for frameworks and jobs the
// detectors were not written for: the innermost telling call wins.
func TestTracebackStructurePhase(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  string
		want Phase
	}{
		{"loss.backward() in the job's script", frames(
			[3]string{"run.py", "<module>", "main()"},
			[3]string{"run.py", "main", "loss.backward()"},
			[3]string{sp + "torch/_tensor.py", "backward", "torch.autograd.backward("}), PhaseTrain},
		{"an optimizer's step, by its source line", frames(
			[3]string{"run.py", "<module>", "opt.step()"},
			[3]string{sp + "torch/optim/optimizer.py", "wrapper", "out = func(*args, **kwargs)"}), PhaseTrain},
		{"a grad scaler's step", frames(
			[3]string{"loop.py", "run_epoch", "self.scaler.step(self.optimizer)"},
			[3]string{sp + "torch/amp/grad_scaler.py", "_maybe_opt_step", "retval = optimizer.step(*args, **kwargs)"}), PhaseTrain},
		{"Keras' fit, then its train function", frames(
			[3]string{"main.py", "<module>", "model.fit(ds, epochs=3)"},
			[3]string{sp + "keras/src/utils/traceback_utils.py", "error_handler", "raise e.with_traceback(filtered_tb) from None"},
			[3]string{sp + "keras/src/backend/tensorflow/trainer.py", "one_step_on_data", "return self.train_step(data)"}), PhaseTrain},
		{"Hugging Face's train, evaluating inside it", frames(
			[3]string{"sft.py", "<module>", "trainer.train()"},
			[3]string{sp + "transformers/trainer.py", "_inner_training_loop", "self._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, epoch)"},
			[3]string{sp + "transformers/trainer.py", "_maybe_log_save_evaluate", "metrics = self._evaluate(trial, ignore_keys_for_eval)"},
			[3]string{sp + "transformers/models/llama/modeling_llama.py", "forward", "outputs = self.model("}), PhaseVal},
		{"Lightning's prediction loop", frames(
			[3]string{"score.py", "<module>", "trainer.predict(model, loader)"},
			[3]string{sp + "lightning/pytorch/loops/prediction_loop.py", "run", "self._predict_step(batch, batch_idx, dataloader_idx)"},
			[3]string{"model.py", "forward", "return self.net(x)"}), PhaseVal},
		{"Lightning's test", frames(
			[3]string{"main.py", "<module>", "trainer.test(model, datamodule=dm)"},
			[3]string{"model.py", "forward", "return self.net(x)"}), PhaseVal},
		{"a fit loop's file names the phase", frames(
			[3]string{sp + "lightning/pytorch/loops/fit_loop.py", "run", "self.advance()"},
			[3]string{"model.py", "forward", "return self.net(x)"}), PhaseTrain},
		{"trap: a teacher's forward inside a training step", frames(
			[3]string{"distill.py", "train_step", "t_logits = teacher(batch).logits"},
			[3]string{sp + "torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"},
			[3]string{"teacher.py", "forward", "return self.body(x)"}), PhaseTrain},
		{"trap: a schedule both phases run", frames(
			[3]string{"megatron/training/training.py", "evaluate", "loss_dicts = forward_backward_func("},
			[3]string{"megatron/core/pipeline_parallel/schedules.py", "forward_backward_no_pipelining", "output_tensor = forward_step("}), PhaseVal},
		{"trap: preparing an optimizer at start-up tells nothing", frames(
			[3]string{"main.py", "<module>", "opt = create_optimizer(model)"},
			[3]string{"main.py", "create_optimizer", "return torch.optim.AdamW(params)"}), PhaseNone},
		{"trap: checking a config tells nothing", frames(
			[3]string{"main.py", "validate_config", "cfg.check()"}), PhaseNone},
		{"trap: the job's own fit command tells nothing", frames(
			[3]string{"cli.py", "fit", "net.restore(ckpt)"}), PhaseNone},
		{"trap: an inference script is no validation", frames(
			[3]string{"demo.py", "infer_depth", "out = net(img)"}), PhaseNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			if v.Kind != KindGPUOOM || v.Phase != tc.want {
				t.Errorf("%s in %q, want gpu_oom in %q (marks %v)", v.Kind, v.Phase, tc.want, v.Phases)
			}
		})
	}
}

// Progress by shape: lines led by a phase's word, a validation's end,
// counter rows named by their loss, an epoch's batch counter.
func TestProgressShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  string
		want Phase
		step int64 // -1: none
	}{
		{"a validation's end: training goes on",
			"train [ 40/120] loss=0.912\nval [25/25] loss=0.948\nvalidation done: val_loss=0.948\nKilled\n", PhaseTrain, -1},
		{"a validation not ended",
			"train [ 40/120] loss=0.912\nval [10/25] loss=0.948\nKilled\n", PhaseVal, -1},
		{"an evaluation's summary behind a logger",
			"INFO: train step 10/100 loss=2.0\nINFO: eval [5/50] loss=2.1\nINFO: eval summary: loss=2.1 acc=0.4\nKilled\n", PhaseTrain, -1},
		{"an evaluation alone ends in evaluation",
			"eval [5/50] loss=2.1\neval finished: loss 2.1\nKilled\n", PhaseVal, -1},
		{"counter rows named by their loss",
			"[5][  100/  800] train loss 0.3311\n[eval][ 50/200] loss 0.4410\n[5][  200/  800] train loss 0.3302\nKilled\n", PhaseTrain, -1},
		{"trap: a training row with a validation column",
			"[3][ 800/ 800] train loss 0.31 val loss 0.44\nKilled\n", PhaseTrain, -1},
		{"a kill after a finished validation bar is training's",
			"Epoch: [5]  [2500/2503]  eta: 0:00:01  lr: 0.1  loss: 3.11\nTest:  [ 90/98]  eta: 0:00:01  loss: 2.88\nTest:  Total time: 0:00:41\nKilled\n", PhaseTrain, -1},
		{"a kill during a validation is validation's",
			"Epoch: [5]  [2500/2503]  eta: 0:00:01  lr: 0.1  loss: 3.11\nTest:  [ 40/98]  eta: 0:00:09  loss: 2.88\nKilled\n", PhaseVal, -1},
		{"an epoch's batch counter",
			"Epoch 7, batch 350/1200, loss 1.0732\nKilled\n", PhaseTrain, 350},
		{"trap: prose with a phase's word",
			"validation set: 5000 images\nTraining data: 90000 images\ntest split: 10%\nKilled\n", PhaseNone, -1},
		{"trap: names that only contain the word",
			"val_loss=0.3 training_args=ok evaluator=coco\nKilled\n", PhaseNone, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			if v.Kind != KindHostOOM || v.Phase != tc.want {
				t.Errorf("%s in %q, want host_oom in %q (marks %v)", v.Kind, v.Phase, tc.want, v.Phases)
			}
			if tc.step >= 0 && (v.Step == nil || *v.Step != tc.step) {
				t.Errorf("step %s, want %d", fmtPtr(v.Step), tc.step)
			}
		})
	}
}

// A counter printed with its epoch that restarts when the epoch advances is
// the batch within the epoch, not the run's step; one that goes on is the
// run's step.
func TestCounterResetsWithEpoch(t *testing.T) {
	resets := "Epoch 1/3 step 490/500 loss=0.61\nEpoch 2/3 step 10/500 loss=0.60\nEpoch 2/3 step 20/500 loss=0.59\nKilled\n"
	v := classifyString(t, resets, ClassifierOptions{})
	checkStep(t, v, stepWant{20, StepInEpoch, 500, 2})
	goesOn := "Epoch 1/3 step 490/1500 loss=0.61\nEpoch 2/3 step 510/1500 loss=0.60\nEpoch 2/3 step 520/1500 loss=0.59\nKilled\n"
	v = classifyString(t, goesOn, ClassifierOptions{})
	checkStep(t, v, stepWant{520, StepGlobal, 1500, 2})
}

// Bars named by their description.
func TestBarDescriptions(t *testing.T) {
	for log, want := range map[string]Phase{
		"Training Epoch 1:  40%|████      | 20/50 [00:10<00:15,  2.00it/s]\n":      PhaseTrain,
		"Validation Epoch 1:  40%|████      | 20/50 [00:10<00:15,  2.00it/s]\n":    PhaseVal,
		"Evaluate: 40%|████      | 20/50 [00:10<00:15,  2.00it/s]\n":               PhaseVal,
		"Predicting DataLoader 0:  40%|████      | 20/50 [00:10<00:15]\n":          PhaseVal,
		"val epoch 2:  40%|████      | 20/50 [00:10<00:15,  2.00it/s]\n":           PhaseVal,
		"Epoch 2:  40%|████      | 20/50 [00:10<00:15,  2.00it/s, val_loss=0.3]\n": PhaseTrain,
	} {
		if v := classifyString(t, log, ClassifierOptions{}); v.Phase != want {
			t.Errorf("%q: phase %q, want %q", strings.TrimSpace(log), v.Phase, want)
		}
	}
}
