package classify

import (
	"fmt"
	"strings"
	"testing"
)

// stepWant is where a log leaves training: -1 where nothing is expected.
type stepWant struct {
	step  int64
	kind  StepKind
	tot   int64
	epoch int64
}

func ptrVal(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

func checkStep(t *testing.T, v Verdict, w stepWant) {
	t.Helper()
	got := stepWant{ptrVal(v.Step), v.StepKind, ptrVal(v.StepTotal), ptrVal(v.Epoch)}
	if got != w {
		t.Errorf("step %d kind %q of %d, epoch %d (line %d: %q); want step %d kind %q of %d, epoch %d",
			got.step, got.kind, got.tot, got.epoch, v.StepLine, v.StepText, w.step, w.kind, w.tot, w.epoch)
	}
	if v.Step != nil && (v.StepLine < 1 || v.StepText == "") {
		t.Errorf("step %d without its line: line %d, text %q", *v.Step, v.StepLine, v.StepText)
	}
	if v.Step == nil && (v.StepLine != 0 || v.StepText != "" || v.StepKind != StepNone || v.StepTotal != nil) {
		t.Errorf("no step, but line %d, text %q, kind %q, total %v", v.StepLine, v.StepText, v.StepKind, v.StepTotal)
	}
}

// Each form a framework prints its training step in, as the framework
// prints it.
func TestStepForms(t *testing.T) {
	const (
		g = StepGlobal
		e = StepInEpoch
		n = StepNone
	)
	cases := []struct {
		name  string
		log   string
		want  stepWant
		phase Phase // "" when not checked
	}{
		// The forms, bar off.
		{"custom loop, epoch and step", "Epoch 3/10 step 120/500 loss=0.512\n", stepWant{120, g, 500, 3}, PhaseTrain},
		{"custom loop, [train] tag", "[train] step 10/100 loss=2.31\n", stepWant{10, g, 100, -1}, PhaseTrain},
		{"plain step line", "step 120/500 loss=2.31\n", stepWant{120, g, 500, -1}, PhaseTrain},
		{"plain step line behind a logger prefix", "INFO:__main__:step 120/500 loss=2.31\n", stepWant{120, g, 500, -1}, PhaseTrain},
		{"Step with pipes", "2024-03-01 10:00:00 INFO Step 120 | loss 2.31 | lr 3e-4\n", stepWant{120, g, -1, -1}, PhaseTrain},
		{"NeMo Automodel", "2026-08-10 16:00:44 | INFO | root | step 8 | epoch 0 | loss 0.7839 | grad_norm 1.7024 | lr 1.00e-05 | mem 24.06 GiB\n", stepWant{8, g, -1, 0}, PhaseTrain},
		{"torchtitan", "[rank0]:[titan] 2025-01-06 10:00:00,123 - root - INFO - step: 10  loss:  9.8765  memory: 30.12GiB(31.70%)  tps: 1,234  mfu: 12.34%\n", stepWant{10, g, -1, -1}, PhaseTrain},
		{"nanoGPT iter", "iter 100: loss 2.3456, time 123.45ms, mfu 12.34%\n", stepWant{100, g, -1, -1}, PhaseTrain},
		{"nanoGPT eval line is the training step", "step 100: train loss 2.3456, val loss 2.4567\n", stepWant{100, g, -1, -1}, PhaseTrain},
		{"lit-gpt: the optimizer step over the iteration", "iter 100 step 25: loss 2.3456, iter time: 123.45ms (optimizer.step)\n", stepWant{25, g, -1, -1}, PhaseTrain},
		{"litgpt", "Epoch 1 | iter 142 step 142 | loss train: 2.417, val_loss valid: 2.603 | iter time: 1.884 s (step)\n", stepWant{142, g, -1, 1}, PhaseTrain},
		{"Megatron-LM", " [2024-05-01 12:00:00] iteration      100/  500000 | consumed samples:        12800 | elapsed time per iteration (ms): 1234.5 | learning rate: 1.500000E-04 | global batch size:   128 | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n", stepWant{100, g, 500000, -1}, PhaseTrain},
		{"Megatron-LM validation line: its step, and the end of validation", " iteration      990/  500000 | consumed samples:       126720 | lm loss: 4.3E+00 |\n validation loss at iteration 1000 | lm loss value: 4.200000E+00 | lm loss PPL: 6.668633E+01 | \n", stepWant{1000, g, -1, -1}, PhaseTrain},
		{"NeMo 2", "Training epoch 0, iteration 496/1999 | lr: 7.455e-05 | consumed_samples: 15904 | global_batch_size: 32 | global_step: 496 | reduced_train_loss: 6.412 | train_step_timing in s: 1.412\n", stepWant{496, g, -1, 0}, PhaseTrain},
		{"NeMo 2 without global_step: the iteration is within the epoch", "Training epoch 2, iteration 96/1999 | lr: 7.455e-05 | reduced_train_loss: 6.412\n", stepWant{96, e, 1999, 2}, PhaseTrain},
		{"NeMo 1 Lightning bar with global_step as a float", "Epoch 0:   1%|          | 795/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1, v_num=, reduced_train_loss=3.090, global_step=794.0, consumed_samples=1.63e+6]\n", stepWant{794, g, -1, 0}, PhaseTrain},
		{"Lightning bar", "Epoch 3:  45%|████▌     | 123/456 [00:12<00:30,  4.51it/s, loss=0.123, v_num=3]\n", stepWant{123, e, 456, 3}, PhaseTrain},
		{"Lightning rich bar", "Epoch 3/9  ━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━━━━ 123/456 0:00:12 • 0:00:30 4.51it/s v_num: 3 train_loss: 0.123\n", stepWant{123, e, 456, 3}, PhaseTrain},
		{"Lightning rich bar without max_epochs", "Epoch 3  ━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━━━━ 123/456 0:00:12 • 0:00:30 4.51it/s v_num: 3\n", stepWant{123, e, 456, 3}, PhaseTrain},
		{"Lightning checkpoint message: a step, not a phase", "Validation DataLoader 0: 100%|██████████| 20/20 [00:01<00:00, 12.1it/s]\nEpoch 3, global step 1200: 'val_loss' reached 0.52000 (best 0.52000), saving model to '/ckpt/epoch=3-step=1200.ckpt' as top 1\n", stepWant{1200, g, -1, 3}, PhaseVal},
		{"a script's step in a Lightning-style bar", "Epoch 2:  40%|####      | 20/50 [step 70, loss=1.827]\n", stepWant{70, g, -1, 2}, PhaseTrain},
		{"Hugging Face: the bar over the total optimization steps", "***** Running training *****\n  Num examples = 12,304\n  Total optimization steps = 27,650\n  9%|▉         | 2499/27650 [2:11:37<22:04:37,  3.16s/it]\n", stepWant{2499, g, 27650, -1}, PhaseTrain},
		{"Hugging Face: an evaluation bar is not it", "  Total optimization steps = 192\n 50%|█████     | 96/192 [01:00<01:00,  1.6it/s]\n100%|██████████| 32/32 [00:05<00:00,  6.1it/s]\n", stepWant{96, g, 192, -1}, ""},
		{"Hugging Face: resumed", "  Continuing training from global step 500\n", stepWant{500, g, -1, -1}, ""},
		{"Hugging Face log dict with its step", "{'loss': 0.4021, 'grad_norm': 1.283, 'learning_rate': 4.5e-05, 'epoch': 0.53, 'step': 40}\n", stepWant{40, g, -1, -1}, PhaseTrain},
		{"Hugging Face log dict without a step", "{'loss': 0.4021, 'grad_norm': 1.283, 'learning_rate': 4.5e-05, 'epoch': 0.53}\n", stepWant{-1, n, -1, -1}, PhaseTrain},
		{"Accelerate scripts and diffusers: Steps bar", "Steps:  12%|█▏        | 120/1000 [01:23<10:00,  1.44it/s, lr=1e-05, step_loss=0.123]\n", stepWant{120, g, 1000, -1}, PhaseTrain},
		{"DeepSpeed log_dist", "[2022-05-23 18:41:02,337] [INFO] [logging.py:69:log_dist] [Rank 0] step=120, skipped=5, lr=[3e-05], mom=[[0.9, 0.98]]\n", stepWant{120, g, -1, -1}, PhaseTrain},
		{"DeepSpeed throughput line", "[2023-06-01 10:00:00,000] [INFO] [timer.py:260:stop] epoch=0/micro_step=240/global_step=120, RunningAvgSamplesPerSec=41.2, CurrSamplesPerSec=40.1, MemAllocated=1.13GB, MaxMemAllocated=14.6GB\n", stepWant{120, g, -1, -1}, ""},
		{"fairseq", "| epoch 001:    850 / 4120 loss=10.812, nll_loss=10.122, ppl=1114.36, wps=61204, ups=0.6, num_updates=847, lr=0.000105954\n", stepWant{847, g, -1, 1}, PhaseTrain},
		{"fairseq hydra", "2020-10-18 02:51:05 | INFO | train_inner | epoch 002:    225 / 1975 loss=7.137, nll_loss=5.804, ppl=55.87, wps=133180, ups=2.19, wpb=60897.9, bsz=1977.7, num_updates=2200, lr=10, gnorm=0.443, clip=0, train_wall=46, wall=1025\n", stepWant{2200, g, -1, 2}, PhaseTrain},
		{"fairseq bar without num_updates", "epoch 003:  13%|#3   | 130/1000 [00:30<03:00, loss=4.2]\n", stepWant{130, e, 1000, 3}, PhaseTrain},
		{"MMEngine epoch-based", "05/27 11:03:44 - mmengine - INFO - Epoch(train)  [2][3150/7329]  lr: 2.0000e-02  eta: 1 day, 19:22:41  loss: 0.8127\n", stepWant{3150, e, 7329, 2}, PhaseTrain},
		{"MMEngine iteration-based", "01/01 00:00:00 - mmengine - INFO - Iter(train) [  50/1000]  lr: 1e-2  loss: 0.8\n", stepWant{50, g, 1000, -1}, PhaseTrain},
		{"mmcv 1.x epoch-based", "2022-01-01 00:00:00,000 - mmdet - INFO - Epoch [7][250/2930]\tlr: 1e-2, loss: 0.5\n", stepWant{250, e, 2930, 7}, PhaseTrain},
		{"mmcv 1.x iteration-based", "2022-01-01 00:00:00,000 - mmseg - INFO - Iter [250/80000]\tlr: 9.978e-03, eta: 1 day, 2:10:00, time: 0.998, data_time: 0.015, memory: 7500, decode.loss_ce: 1.2, loss: 1.2\n", stepWant{250, g, 80000, -1}, PhaseTrain},
		{"Detectron2", "[06/09 22:15:44 d2.utils.events]:  eta: 0:42:10  iter: 19  total_loss: 2.118  loss_cls: 0.9872  lr: 3.9962e-05  max_mem: 2911M\n", stepWant{19, g, -1, -1}, PhaseTrain},
		{"Detectron2 resumed", "[06/09 22:15:31 d2.engine.train_loop]: Starting training from iteration 5000\n", stepWant{5000, g, -1, -1}, PhaseTrain},
		{"Keras", "Epoch 2/10\n 32/100 [========>.....................] - ETA: 3s - loss: 0.52\n", stepWant{32, e, 100, 2}, PhaseTrain},
		{"Keras end of epoch: 50ms/step is no step", "Epoch 2/10\n100/100 [==============================] - 5s 50ms/step - loss: 0.4 - val_loss: 0.3\n", stepWant{100, e, 100, 2}, PhaseTrain},
		{"Ultralytics", "     88/300      8.02G     0.9096     0.6011      1.079        587        640: 100%|██████████| 57/57 [00:47<00:00,  1.20it/s]\n", stepWant{57, e, 57, 88}, PhaseTrain},
		{"timm", "Train: 3 [ 100/1251 (  8%)]  Loss: 4.1 (4.2)  Time: 0.3s\n", stepWant{100, e, 1251, 3}, PhaseTrain},
		{"ImageNet example", "Epoch: [3][2417/5005]\tTime  0.5\n", stepWant{2417, e, 5005, 3}, PhaseTrain},
		{"PyTorch tutorial: Step [i/N] counts batches of the epoch", "Epoch [1/10], Step [100/600], Loss: 0.2\n", stepWant{100, e, 600, 1}, PhaseTrain},
		{"catalyst", "1/10 * Epoch (train): 100% 50/50 [00:10<00:00]\n", stepWant{50, e, 50, 1}, PhaseTrain},
		{"explicit marker", "gpuguard: phase=train step=999 epoch=2\n", stepWant{999, g, -1, 2}, PhaseTrain},

		// Not steps.
		{"a checkpoint's name", "saving checkpoint to /ckpt/epoch=3-step=1200.ckpt\n", stepWant{-1, n, -1, -1}, ""},
		{"DeepSpeed's checkpoint directory", "[INFO] Saving model checkpoint to out/global_step1000/mp_rank_00_model_states.pt\n", stepWant{-1, n, -1, -1}, ""},
		{"an unlabelled bar", "Loading checkpoint shards: 100%|██████████| 8/8 [00:27<00:00,  3.41s/it]\n 60%|██████    | 3/5 [00:02<00:01,  1.31it/s]\n", stepWant{-1, n, -1, -1}, ""},
		{"settings", "  Gradient Accumulation steps = 8\n  Total optimization steps = 192\nmax_steps: 1000 warmup_steps: 100\n{'global_step': 0, 'loss_type': 'ce'}\n", stepWant{-1, n, -1, -1}, ""},
		{"a metric named after steps", "train_step_timing in s: 1.412, step_loss=0.5\n", stepWant{-1, n, -1, -1}, ""},
		{"where a resumed job starts", "resumed from checkpoints/example/step_50.ckpt at step 50\nstarting at step 51\n", stepWant{-1, n, -1, -1}, ""},
		{"a float is not a step", "step 2.5 loss 1.0\n", stepWant{-1, n, -1, -1}, ""},
		{"scientific notation is not a step", "Epoch 0:   1%|          | 795/77225 [41.36s/it, global_step=1.23e+05]\n", stepWant{795, e, 77225, 0}, PhaseTrain},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log, ClassifierOptions{})
			checkStep(t, v, tc.want)
			if tc.phase != "" && v.Phase != tc.phase {
				t.Errorf("phase %q, want %q", v.Phase, tc.phase)
			}
		})
	}
}

// Once the output has shown a training step, a bar's position does not
// replace it; it still counts as progress after a failure (compared with
// the bar's own earlier positions).
func TestStepKindsKeptApart(t *testing.T) {
	bar := func(i int) string { return fmt.Sprintf("Epoch 3:  %d%%|#  | %d/50 [00:01<00:02]\n", 2*i, i) }
	log := "Epoch 3/10 step 120/500 loss=0.5\n" + bar(20) + bar(21)
	v := classifyString(t, log, ClassifierOptions{})
	checkStep(t, v, stepWant{120, StepGlobal, 500, 3})
	if v.StepLine != 1 || !strings.Contains(v.Diagnosis, "at step 120 (epoch 3)") {
		t.Errorf("line %d, diagnosis %q", v.StepLine, v.Diagnosis)
	}

	// A caught OOM: the bar goes on twice, the job survived it.
	v = classifyString(t, log+"RuntimeError: CUDA error: out of memory\n"+bar(21)+bar(22)+bar(23), ClassifierOptions{})
	if v.Kind != KindNone {
		t.Errorf("training went on after the OOM: %s", v.Kind)
	}
	// A training step printed after the bar is another counter: one tick.
	v = classifyString(t, log+"RuntimeError: CUDA error: out of memory\n"+bar(22)+"Epoch 3/10 step 121/500 loss=0.5\n", ClassifierOptions{})
	if v.Kind != KindGPUOOM {
		t.Errorf("one advance of each counter is not two: %s", v.Kind)
	}

	// Only positions within the epoch: the diagnosis says so.
	v = classifyString(t, bar(20)+"RuntimeError: CUDA error: out of memory\n", ClassifierOptions{})
	checkStep(t, v, stepWant{20, StepInEpoch, 50, 3})
	if !strings.Contains(v.Diagnosis, "at batch 20/50 of epoch 3") {
		t.Errorf("diagnosis %q", v.Diagnosis)
	}
}

// The step is the one at the failure, with the line it was read from.
func TestStepAtFailure(t *testing.T) {
	log := "step 10/100 loss=2.0\nstep 11/100 loss=1.9\n" + modernOOM + "\nstep 12/100 loss=1.9\n"
	v := classifyString(t, log, ClassifierOptions{})
	if v.Kind != KindGPUOOM {
		t.Fatalf("%s", v.Kind)
	}
	checkStep(t, v, stepWant{11, StepGlobal, 100, -1})
	if v.StepLine != 2 || v.StepText != "step 11/100 loss=1.9" {
		t.Errorf("read at line %d: %q", v.StepLine, v.StepText)
	}
	// A long line is cut, at a character boundary.
	long := "step 7 loss=1.0 " + strings.Repeat("é", 300) + "\n"
	v = classifyString(t, long, ClassifierOptions{})
	if len(v.StepText) > maxStepText || !strings.HasSuffix(v.StepText, "…") || !strings.HasPrefix(v.StepText, "step 7 loss=1.0 é") {
		t.Errorf("long step text (%d bytes) %q", len(v.StepText), v.StepText)
	}
	// Exit without a message: the step at the end.
	c, _ := classifyEvents(t, "step 5 loss=1\n")
	c.Exit(Exit{Code: 3})
	if v := c.Verdict(); v.Kind != KindCrash || ptrVal(v.Step) != 5 || v.StepKind != StepGlobal || v.StepLine != 1 {
		t.Errorf("%s step %s kind %q line %d", v.Kind, fmtPtr(v.Step), v.StepKind, v.StepLine)
	}
}

func TestPositionCmp(t *testing.T) {
	gs := func(s int64) Position { return GlobalStep(s) }
	in := func(e, s, tot int64) Position { return Position{Kind: StepInEpoch, Step: s, Total: tot, Epoch: e} }
	ep := func(e int64) Position { return Position{Step: -1, Total: -1, Epoch: e} }
	none := Position{Step: -1, Total: -1, Epoch: -1}
	for _, tc := range []struct {
		name string
		p, q Position
		c    int
		ok   bool
	}{
		{"global after", gs(130), gs(100), 1, true},
		{"global same", gs(100), gs(100), 0, true},
		{"global behind", gs(90), gs(100), -1, true},
		{"global whatever the epochs", Position{Kind: StepGlobal, Step: 130, Total: -1, Epoch: 2}, Position{Kind: StepGlobal, Step: 100, Total: -1, Epoch: 3}, 1, true},
		{"bar position against a global step", in(3, 29, 50), gs(100), 0, false},
		{"global step against a bar position", gs(130), in(3, 29, 50), 0, false},
		{"later epoch", in(4, 1, 50), in(3, 49, 50), 1, true},
		{"same epoch, further", in(3, 30, 50), in(3, 29, 50), 1, true},
		{"same epoch, same batch", in(3, 29, 50), in(3, 29, 50), 0, true},
		{"halved batch: batch 58 of 100 is batch 29 of 50", in(3, 58, 100), in(3, 29, 50), 0, true},
		{"halved batch, further", in(3, 60, 100), in(3, 29, 50), 1, true},
		{"epoch decides across kinds", Position{Kind: StepGlobal, Step: 130, Total: -1, Epoch: 4}, in(3, 29, 50), 1, true},
		{"one epoch unknown", in(-1, 30, 50), in(3, 29, 50), 0, false},
		{"epochs alone", ep(3), ep(2), 1, true},
		{"same epoch alone", ep(3), ep(3), 0, true},
		{"epoch alone against a bar in it", ep(3), in(3, 29, 50), 0, false},
		{"nothing", none, none, 0, false},
		{"nothing against a step", none, gs(3), 0, false},
	} {
		c, ok := tc.p.Cmp(tc.q)
		if c != tc.c || ok != tc.ok {
			t.Errorf("%s: Cmp = %d, %v; want %d, %v", tc.name, c, ok, tc.c, tc.ok)
		}
	}
	var v Verdict
	if p := v.Position(); p != none {
		t.Errorf("empty verdict's position %+v", p)
	}
}
