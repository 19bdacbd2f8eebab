package classify

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Phase lines and steps of frameworks, one line at a time (after the lines
// of ctx, which set the scene where a line means something only after
// another). Samples of our own making: each framework's print template,
// with values of our own.
func TestFrameworkPhaseLines(t *testing.T) {
	const (
		g = StepGlobal
		e = StepInEpoch
		n = StepNone
	)
	none := stepWant{-1, n, -1, -1}
	cases := []struct {
		name, ctx, line string
		phase           Phase // the phase after the line ("": none yet)
		want            stepWant
	}{
		// nanoGPT: iterations, and the evaluation's results line, after which it trains on.
		{"nanoGPT iteration", "", "iter 4200: loss 1.3312, time 298.10ms, mfu 41.07%", PhaseTrain, stepWant{4200, g, -1, -1}},
		{"nanoGPT evaluation results", "", "step 4250: train loss 1.2911, val loss 1.4120", PhaseTrain, stepWant{4250, g, -1, -1}},
		// litgpt: the optimizer step over the iteration; "val: n/a" is a column of the training line.
		{"litgpt training line", "", "Epoch 2 | iter 880 step 220 | loss train: 2.114, val: n/a | iter time: 388.20 ms (step) remaining time: 0:41:07", PhaseTrain, stepWant{220, g, -1, 2}},
		{"litgpt validating", "Epoch 2 | iter 880 step 220 | loss train: 2.114, val: n/a | iter time: 388.20 ms (step)", "Validating ...", PhaseVal, stepWant{220, g, -1, 2}},
		{"litgpt validation over: its iter is not the step", "Epoch 2 | iter 880 step 220 | loss train: 2.114, val: n/a | iter time: 388.20 ms (step)\nValidating ...", "iter 880: val loss 2.0871, val time: 7012.44 ms", PhaseTrain, stepWant{220, g, -1, 2}},
		// torchtitan
		{"torchtitan step", "", "[rank0]:[titan] 2026-11-25 09:00:00,001 - root - INFO - step: 120  loss:  5.4419  grad_norm:  0.9120  memory: 38.02GiB(48.03%)  tps: 7,104  tflops: 331.20  mfu: 33.49%", PhaseTrain, stepWant{120, g, -1, -1}},
		{"torchtitan validation results: the step, no phase", "", "[rank0]:[titan] 2026-11-25 09:00:40,001 - root - INFO - validate step: 120  loss:  5.3911  memory: 38.02GiB(48.03%)  tps: 20,118", "", stepWant{120, g, -1, -1}},
		// torchtune: the bar's description is epoch|global step|loss; the bar counts the epoch's steps.
		{"torchtune bar", "", "3|211|Loss: 0.8712:  22%|██▏       | 11/50 [00:47<02:48,  4.31s/it]", PhaseTrain, stepWant{211, g, -1, 3}},
		{"torchtune metric line", "", "Step 211 | loss:0.8712 lr:1.8e-05 tokens_per_second_per_gpu:2911.04 ", PhaseTrain, stepWant{211, g, -1, -1}},
		{"torchtune validation metric: val_loss is no training line", "", "Step 220 | val_loss:0.8421 ", "", stepWant{220, g, -1, -1}},
		{"torchtune validation results", "", "Validation loss: 0.8421", PhaseVal, none},
		// Megatron-LM
		{"Megatron-LM iteration", "", " [2026-11-25 09:10:00.000001] iteration     2400/   40000 | consumed samples:       614400 | elapsed time per iteration (ms): 640.2 | learning rate: 2.400000E-04 | global batch size:   256 | lm loss: 2.911044E+00 | loss scale: 1.0 | grad norm: 0.611 | number of skipped iterations:   0 | number of nan iterations:   0 |", PhaseTrain, stepWant{2400, g, 40000, -1}},
		{"Megatron-LM verbose evaluation", "", "Evaluating iter 3/20", PhaseVal, none},
		{"Megatron-LM validation block ends validation", "Evaluating iter 20/20", " validation loss at iteration 2500 on validation set | lm loss value: 2.871190E+00 | lm loss PPL: 1.765841E+01 | ", PhaseTrain, stepWant{2500, g, -1, -1}},
		// Hugging Face Trainer and TRL; the training bar's total is the run's optimization steps.
		{"HF training bar", "  Total optimization steps = 1,200", " 40%|████      | 480/1200 [10:02<15:03,  1.25s/it]", PhaseTrain, stepWant{480, g, 1200, -1}},
		{"HF evaluation banner", "", "***** Running Evaluation *****", PhaseVal, none},
		{"HF evaluation dict", "", "{'eval_loss': 1.2201, 'eval_runtime': 12.04, 'eval_samples_per_second': 41.5, 'eval_steps_per_second': 5.2, 'epoch': 1.0}", PhaseVal, none},
		{"HF training bar after an evaluation", "  Total optimization steps = 1,200\n***** Running Evaluation *****\n{'eval_loss': 1.2201, 'epoch': 1.0}", " 40%|████      | 481/1200 [10:04<15:03,  1.25s/it]", PhaseTrain, stepWant{481, g, 1200, -1}},
		{"HF at the default log level, under a terminal: the dict's bar is training, another bar evaluation",
			"\r  3%|▎         | 20/600 [00:12<05:55,  1.63it/s]\r" + strings.Repeat(" ", 48) + "\r{'loss': 2.2011, 'grad_norm': 4.117, 'learning_rate': 4.83e-05, 'epoch': 0.1}\r\n\r  3%|▎         | 20/600 [00:12<05:55,  1.63it/s]\r  0%|          | 0/25 [00:00<?, ?it/s]",
			" 48%|████▊     | 12/25 [00:01<00:01,  9.91it/s]", PhaseVal, stepWant{20, g, 600, -1}},
		{"HF: a bar with text glued to it is not the training bar",
			"  0%|          | 0/2000001 [00:00<?, ?it/s]Skipping token 2000000 with 1-dimensional vector\n{'loss': 2.2011, 'epoch': 0.1}",
			" 48%|████▊     | 12/25 [00:01<00:01,  9.91it/s]", PhaseTrain, none},
		{"TRL log dict", "", "{'loss': 0.6812, 'grad_norm': 9.31, 'learning_rate': 4.7e-07, 'rewards/chosen': 0.0131, 'rewards/rejected': -0.0102, 'rewards/accuracies': 0.6, 'epoch': 0.05}", PhaseTrain, none},
		{"TRL evaluation dict", "", "{'eval_loss': 0.6790, 'eval_runtime': 30.2, 'eval_rewards/chosen': 0.031, 'eval_rewards/accuracies': 0.64, 'epoch': 0.05}", PhaseVal, none},
		{"eval_steps= in a config dump", "", "eval_steps=250,", "", none},
		{"eval_strategy in a config dump", "", "eval_strategy=IntervalStrategy.STEPS,", "", none},
		{"evaluation_strategy in a config dump", "", "evaluation_strategy=steps,", "", none},
		// Accelerate examples: the evaluation's summary is not a progress line.
		{"Accelerate epoch summary", "", "epoch 2: {'accuracy': 0.8431, 'f1': 0.8912}", "", none},
		{"Accelerate no_trainer summary", "", "11/25/2026 09:00:00 - INFO - __main__ - epoch 1: perplexity: 18.02 eval_loss: 2.8915", "", none},
		// diffusers
		{"diffusers steps bar", "", "Steps:  31%|███       | 310/1000 [04:12<09:22,  1.23it/s, lr=5e-06, step_loss=0.0712]", PhaseTrain, stepWant{310, g, 1000, -1}},
		{"diffusers validation", "", "11/25/2026 09:05:00 - INFO - __main__ - Running validation... ", PhaseVal, none},
		// timm
		{"timm train", "", "Train: 7 [ 300/1251 ( 24%)]  Loss: 3.41 (3.52)  Time: 0.301s,  850.11/s  (0.305s,  839.20/s)  LR: 8.12e-04  Data: 0.010 (0.012)", PhaseTrain, stepWant{300, e, 1251, 7}},
		{"timm test", "", "Test: [  20/48]  Time: 0.210 (0.390)  Loss:  2.1010 (2.2003)  Acc@1: 55.1200 (53.4100)  Acc@5: 79.0100 (78.2200)", PhaseVal, none},
		{"timm test with EMA", "", "Test (EMA): [  20/48]  Time: 0.210 (0.390)  Loss:  2.0410 (2.1003)", PhaseVal, none},
		// torchvision references
		{"torchvision epoch", "", "Epoch: [5]  [ 700/2503]  eta: 0:11:40  lr: 0.1  img/s: 402.3  loss: 3.1120 (3.2201)  acc1: 31.2500 (29.1102)  acc5: 56.2500 (54.2031)  time: 0.3880  data: 0.0011  max mem: 10542", PhaseTrain, stepWant{700, e, 2503, 5}},
		{"torchvision test", "", "Test:  [ 40/98]  eta: 0:00:09  loss: 2.8812 (2.9013)  acc1: 38.2812 (36.0101)  acc5: 63.2812 (62.1120)  time: 0.1210  data: 0.0009  max mem: 10542", PhaseVal, none},
		{"torchvision test of the EMA model", "", "Test: EMA  [ 40/98]  eta: 0:00:09  loss: 2.8012 (2.8513)  time: 0.1210  data: 0.0009  max mem: 10542", PhaseVal, none},
		{"torchvision test results", "", "Test:  Acc@1 36.011 Acc@5 62.112", PhaseVal, none},
		// Keras 3: the batch within the epoch; val_ columns belong to the epoch's row.
		{"Keras 3 bar", "Epoch 4/20", " 61/250 ━━━━━━━━━━━━━━━━━━━━ 9s 48ms/step - accuracy: 0.7712 - loss: 0.6120", PhaseTrain, stepWant{61, e, 250, 4}},
		{"Keras 3 end of epoch with val_loss", "Epoch 4/20", "250/250 ━━━━━━━━━━━━━━━━━━━━ 13s 51ms/step - accuracy: 0.7902 - loss: 0.5811 - val_accuracy: 0.8012 - val_loss: 0.5512", PhaseTrain, stepWant{250, e, 250, 4}},
		{"Keras 3 verbose=2", "Epoch 4/20", "250/250 - 13s - 51ms/step - accuracy: 0.7902 - loss: 0.5811 - val_accuracy: 0.8012 - val_loss: 0.5512", PhaseTrain, stepWant{250, e, 250, 4}},
		{"Keras 3 unknown length", "Epoch 1/20", "     37/Unknown 4s 47ms/step - loss: 0.9011", PhaseTrain, stepWant{37, e, -1, 1}},
		// Lightning 2.x
		{"Lightning sanity check", "", "Sanity Checking DataLoader 0:  50%|█████     | 1/2 [00:00<00:00,  3.91it/s]", PhaseVal, none},
		{"Lightning first epoch bar after an unfinished sanity check", "Sanity Checking DataLoader 0:  50%|█████     | 1/2 [00:00<00:00,  3.91it/s]", "Epoch 0:   0%|          | 0/120 [00:00<?, ?it/s]", PhaseTrain, stepWant{0, e, 120, 0}},
		{"Lightning val_loss in the epoch bar", "", "Epoch 3:  60%|██████    | 72/120 [00:21<00:14,  3.40it/s, v_num=7, train_loss=0.401, val_loss=0.388, val_acc=0.871]", PhaseTrain, stepWant{72, e, 120, 3}},
		{"Lightning validation bar", "", "Validation DataLoader 0:  25%|██▌       | 5/20 [00:00<00:01, 11.20it/s]", PhaseVal, none},
		// Rich progress bars (Lightning's RichProgressBar and plain rich.progress)
		{"Lightning rich epoch bar", "", "Epoch 3/19 ━━━━━━━━━━━━━━━━╸━━━━━━━━━━━━━━━━━━━━━━ 72/120 0:00:21 • 0:00:14 3.40it/s v_num: 7 train_loss: 0.401", PhaseTrain, stepWant{72, e, 120, 3}},
		{"Lightning rich validation bar", "", "Validation ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 20/20 0:00:01 • 0:00:00 11.20it/s", PhaseVal, none},
		{"rich bar labelled Training", "", "Training ━━━━━━━━━━━━━━━━╺━━━━━━━━━━━━━━━━━━━━━━━  41% 0:01:12", PhaseTrain, none},
		{"rich bar labelled Evaluating", "", "Evaluating ━━━━━━━━━━━━━━━━━━━━━━━╺━━━━━━━━━━━━━━━━  62% 0:00:03", PhaseVal, none},
		// Composer
		{"Composer training bar by epochs", "", "train          Epoch   2:  30%|███       | 15/50 [00:08<00:18,  1.91ba/s, loss/train/total=1.9012]", PhaseTrain, stepWant{15, e, 50, 2}},
		{"Composer training bar by batches", "", "train                          31%|███       | 310/1000 [02:41<05:59,  1.92ba/s, loss/train/total=1.8812]", PhaseTrain, stepWant{310, g, 1000, -1}},
		{"Composer evaluation bar", "", "eval           Epoch   2: 100%|██████████| 10/10 [00:04<00:00,  2.40ba/s, metrics/eval/Accuracy=0.6120]", PhaseVal, none},
		{"Composer mid-epoch evaluation bar", "", "eval           Batch 310:  40%|████      | 4/10 [00:01<00:02,  2.38ba/s]", PhaseVal, none},
		{"Composer console, by epochs", "", "[epoch=3][batch=15/50]:", PhaseTrain, stepWant{15, e, 50, 3}},
		{"Composer console, by batches", "", "[batch=310/1000]:", PhaseTrain, stepWant{310, g, 1000, -1}},
		{"Composer console evaluation", "", "[Eval batch=4/10] Eval on eval data:", PhaseVal, none},
		// Detectron2
		{"Detectron2 iteration", "", "[11/25 09:00:00 d2.utils.events]:  eta: 0:40:12  iter: 1239  total_loss: 0.8121  loss_cls: 0.2901  lr: 0.02  max_mem: 5120M", PhaseTrain, stepWant{1239, g, -1, -1}},
		{"Detectron2 inference", "", "[11/25 09:01:00 d2.evaluation.evaluator]: Inference done 120/1250. Dataloading: 0.0010 s/iter. Inference: 0.0501 s/iter. Eval: 0.0002 s/iter. Total: 0.0513 s/iter. ETA=0:00:58", PhaseVal, none},
		// MMEngine
		{"MMEngine epoch-based", "", "11/25 09:00:00 - mmengine - INFO - Epoch(train)  [4][ 300/1466]  base_lr: 1.0000e-02 lr: 1.0000e-02  eta: 2:11:02  time: 0.4012  data_time: 0.0101  memory: 6120  loss: 0.9120", PhaseTrain, stepWant{300, e, 1466, 4}},
		{"MMEngine validation", "", "11/25 09:10:00 - mmengine - INFO - Epoch(val)  [4][ 100/500]    eta: 0:01:20  time: 0.2010  data_time: 0.0040  memory: 1210", PhaseVal, stepWant{-1, n, -1, 4}},
		{"MMEngine iteration-based validation", "", "11/25 09:10:00 - mmengine - INFO - Iter(val) [100/500]    eta: 0:01:20  time: 0.2010  data_time: 0.0040  memory: 1210", PhaseVal, none},
		// PaddlePaddle: Model.fit, PaddleNLP's trainer, PaddleDetection
		{"Paddle Model.fit step: the batch of the epoch", "Epoch 3/10", "step 120/938 [=====>........................] - loss: 0.4120 - acc: 0.8712 - ETA: 38s - 47ms/step", PhaseTrain, stepWant{120, e, 938, 3}},
		{"Paddle evaluation begins", "Epoch 3/10", "Eval begin...", PhaseVal, stepWant{-1, n, -1, 3}},
		{"Paddle evaluation step is no training step", "Epoch 3/10\nEval begin...", "step 40/157 [=======>......................] - loss: 0.3012 - acc: 0.9001 - ETA: 0s - 6ms/step", PhaseVal, stepWant{-1, n, -1, 3}},
		{"Paddle evaluation ends: still in it until the next epoch", "Eval begin...", "Eval samples: 10000", PhaseVal, none},
		{"PaddleNLP trainer log", "", "[2026-11-25 09:00:00,001] [    INFO] - loss: 1.91203, learning_rate: 2.4e-05, global_step: 410, interval_runtime: 10.2, interval_samples_per_second: 12.5, epoch: 0.1402", PhaseTrain, stepWant{410, g, -1, -1}},
		{"PaddleDetection epoch", "", "[11/25 09:00:00] ppdet.engine INFO: Epoch: [6] [ 200/1466] learning_rate: 0.010000 loss: 0.981 eta: 2:40:01 batch_cost: 0.5001 data_cost: 0.0010 ips: 16.0012 images/s", PhaseTrain, stepWant{200, e, 1466, 6}},
		{"PaddleDetection evaluation", "", "[11/25 09:10:00] ppdet.engine INFO: Eval iter: 300", PhaseVal, none},
		{"PaddleOCR training line", "", "[2026/11/25 09:00:00] ppocr INFO: epoch: [3/500], global_step: 410, lr: 0.001000, acc: 0.4012, loss: 8.1203, avg_reader_cost: 0.01 s, ips: 75.1 samples/s, eta: 1 day, 1:00:01", PhaseTrain, stepWant{410, g, -1, 3}},
		{"PaddleOCR evaluation bar", "", "eval model:: 40%|████      | 20/50 [00:02<00:03,  9.51it/s]", PhaseVal, none},
		// ESPnet
		{"ESPnet epoch start", "", "[node-03] 2026-11-25 09:00:00,001 (trainer:321) INFO: 7/50epoch started. Estimated time to finish: 5 hours", PhaseTrain, stepWant{-1, n, -1, 7}},
		{"ESPnet training batches", "", "[node-03] 2026-11-25 09:02:00,001 (trainer:755) INFO: 7epoch:train:401-500batch: iter_time=1.101e-04, forward_time=0.198, loss_ctc=41.002, loss_att=30.118, acc=0.801, loss=33.383, backward_time=0.171, optim_step_time=0.038, optim0_lr0=6.100e-04, train_time=0.482", PhaseTrain, stepWant{500, e, -1, 7}},
		{"ESPnet epoch summary", "", "[node-03] 2026-11-25 09:40:00,001 (trainer:381) INFO: 7epoch results: [train] iter_time=1.1e-04, loss=33.001, acc=0.802, time=38 minutes and 2.1 seconds, total_count=4000, [valid] loss=29.118, acc=0.833, cer=0.101, wer=0.288, time=41.2 seconds, total_count=300", "", none},
		// SpeechBrain: a bare training bar with its train_loss, then a bare validation bar.
		{"SpeechBrain training bar", "", " 31%|███       | 372/1200 [01:31<03:23,  4.07it/s, train_loss=2.01]", PhaseTrain, stepWant{372, e, 1200, -1}},
		{"SpeechBrain validation bar", "100%|██████████| 1200/1200 [04:55<00:00,  4.06it/s, train_loss=1.77]", " 55%|█████▌    | 110/200 [00:11<00:09,  9.77it/s]", PhaseVal, stepWant{1200, e, 1200, -1}},
		{"SpeechBrain epoch summary", "", "speechbrain.utils.train_logger - epoch: 4, lr: 6.40e-01 - train loss: 1.77 - valid loss: 1.61, valid error: 2.71e-01", "", none},
		{"a bare bar alone is nothing", "", " 55%|█████▌    | 110/200 [00:11<00:09,  9.77it/s]", "", none},
		// Ultralytics: epoch 134 of 200, batch 115 of 115 of it (not step 115).
		{"Ultralytics row", "", "    134/200      7.91G     0.9412     0.6188      1.102        211        640: 100%|██████████| 115/115 [00:54<00:00,  2.10it/s]", PhaseTrain, stepWant{115, e, 115, 134}},
		{"Ultralytics row, its own bar", "", "    134/200      7.91G     0.9412     0.6188      1.102        211        640: 100% ━━━━━━━━━━━━ 115/115 2.1it/s 54.8s", PhaseTrain, stepWant{115, e, 115, 134}},
		{"Ultralytics validation bar", "", "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 50% ━━━━━━────── 4/8 3.2it/s 1.3s<1.3s", PhaseVal, none},
		// Traps: metric names of validation inside training lines.
		{"val_acc in a training line", "", "step 310/1000 loss=0.812 train_acc=0.71", PhaseTrain, stepWant{310, g, 1000, -1}},
		{"val_loss column in a custom training row", "", "Epoch 3/10 step 310/1000 loss=0.812 val_loss=0.790 val_acc=0.74", PhaseTrain, stepWant{310, g, 1000, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := tc.line + "\n"
			if tc.ctx != "" {
				log = tc.ctx + "\n" + log
			}
			v := classifyString(t, log, ClassifierOptions{})
			if v.Phase != tc.phase {
				t.Errorf("phase %q, want %q", v.Phase, tc.phase)
			}
			checkStep(t, v, tc.want)
		})
	}
}

// markAt is a phase mark: where a phase starts.
type markAt struct {
	line  int
	phase Phase
}

// A scenario per framework (testdata/phases): training, a validation, back
// to training. marks are the phase starts; valLine is a line inside the
// validation, where an OOM is put in validation with the training step (or
// position) reached before it; trainLine a training line after it.
func TestFrameworkScenarios(t *testing.T) {
	const g, e = StepGlobal, StepInEpoch
	cases := []struct {
		file               string
		marks              []markAt
		valLine, trainLine int
		atVal, atEnd       stepWant
	}{
		{"nanogpt.log", []markAt{{2, PhaseTrain}}, 0, 6, stepWant{}, stepWant{2010, g, -1, -1}},
		{"litgpt.log", []markAt{{1, PhaseTrain}, {2, PhaseVal}, {3, PhaseTrain}}, 2, 5, stepWant{49, g, -1, 1}, stepWant{52, g, -1, 1}},
		{"torchtitan.log", []markAt{{1, PhaseTrain}}, 0, 4, stepWant{}, stepWant{60, g, -1, -1}},
		{"torchtune.log", []markAt{{1, PhaseTrain}, {4, PhaseVal}, {6, PhaseTrain}}, 5, 7, stepWant{40, g, -1, 1}, stepWant{42, g, -1, 1}},
		{"megatron.log", []markAt{{1, PhaseTrain}, {3, PhaseVal}, {7, PhaseTrain}}, 5, 9, stepWant{1000, g, 20000, -1}, stepWant{1010, g, 20000, -1}},
		{"hf-trainer.log", []markAt{{7, PhaseTrain}, {13, PhaseVal}, {18, PhaseTrain}}, 16, 19, stepWant{100, g, 750, -1}, stepWant{102, g, 750, -1}},
		{"hf-trainer-default-log-level.log", []markAt{{3, PhaseTrain}, {8, PhaseVal}, {11, PhaseTrain}}, 9, 13, stepWant{20, g, 600, -1}, stepWant{22, g, 600, -1}},
		{"trl.log", []markAt{{1, PhaseTrain}, {5, PhaseVal}, {8, PhaseTrain}}, 6, 8, stepWant{10, g, 310, -1}, stepWant{11, g, 310, -1}},
		{"accelerate.log", []markAt{{1, PhaseTrain}}, 0, 7, stepWant{}, stepWant{117, g, 345, -1}},
		{"diffusers.log", []markAt{{1, PhaseTrain}, {4, PhaseVal}, {6, PhaseTrain}}, 5, 7, stepWant{120, g, 1000, -1}, stepWant{122, g, 1000, -1}},
		{"timm.log", []markAt{{1, PhaseTrain}, {3, PhaseVal}, {5, PhaseTrain}}, 4, 6, stepWant{1250, e, 1251, 3}, stepWant{50, e, 1251, 4}},
		{"torchvision.log", []markAt{{1, PhaseTrain}, {3, PhaseVal}, {7, PhaseTrain}}, 4, 8, stepWant{2490, e, 2503, 0}, stepWant{10, e, 2503, 1}},
		{"keras3.log", []markAt{{1, PhaseTrain}}, 0, 6, stepWant{}, stepWant{100, e, 100, 3}},
		{"lightning2.log", []markAt{{1, PhaseVal}, {2, PhaseTrain}, {4, PhaseVal}, {6, PhaseTrain}}, 4, 7, stepWant{20, e, 50, 0}, stepWant{22, e, 50, 0}},
		{"rich.log", []markAt{{1, PhaseVal}, {2, PhaseTrain}, {3, PhaseVal}, {4, PhaseTrain}, {6, PhaseVal}, {7, PhaseTrain}}, 3, 7, stepWant{23, e, 50, 1}, stepWant{24, e, 50, 1}},
		{"composer.log", []markAt{{1, PhaseTrain}, {2, PhaseVal}, {4, PhaseTrain}}, 2, 5, stepWant{23, e, 50, 0}, stepWant{25, e, 50, 0}},
		{"detectron2.log", []markAt{{1, PhaseTrain}, {3, PhaseVal}, {6, PhaseTrain}}, 4, 6, stepWant{4999, g, -1, -1}, stepWant{5019, g, -1, -1}},
		{"mmengine.log", []markAt{{1, PhaseTrain}, {4, PhaseVal}, {6, PhaseTrain}}, 4, 6, stepWant{625, e, 625, 1}, stepWant{50, e, 625, 2}},
		{"paddle.log", []markAt{{1, PhaseTrain}, {4, PhaseVal}, {8, PhaseTrain}}, 5, 9, stepWant{938, e, 938, 1}, stepWant{10, e, 938, 2}},
		{"paddlenlp.log", []markAt{{1, PhaseTrain}, {4, PhaseVal}, {7, PhaseTrain}}, 5, 7, stepWant{120, g, -1, -1}, stepWant{130, g, -1, -1}},
		{"paddledetection.log", []markAt{{1, PhaseTrain}, {2, PhaseVal}, {4, PhaseTrain}}, 3, 4, stepWant{1400, e, 1466, 3}, stepWant{0, e, 1466, 4}},
		{"paddleocr.log", []markAt{{1, PhaseTrain}, {3, PhaseVal}, {6, PhaseTrain}}, 3, 6, stepWant{250, g, -1, 2}, stepWant{260, g, -1, 2}},
		{"espnet.log", []markAt{{1, PhaseTrain}}, 0, 5, stepWant{}, stepWant{100, e, -1, 4}},
		{"speechbrain.log", []markAt{{3, PhaseTrain}, {6, PhaseVal}, {9, PhaseTrain}}, 6, 9, stepWant{1200, e, 1200, -1}, stepWant{12, e, 1200, -1}},
		{"ultralytics.log", []markAt{{1, PhaseTrain}, {3, PhaseVal}, {6, PhaseTrain}}, 4, 7, stepWant{115, e, 115, 134}, stepWant{3, e, 115, 135}},
	}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.file, ".log"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "phases", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			ls := strings.SplitAfter(string(data), "\n")
			v := classifyString(t, string(data), ClassifierOptions{})
			var got []markAt
			for _, m := range v.Phases {
				got = append(got, markAt{m.Line, m.Phase})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.marks) {
				t.Errorf("phase marks %v, want %v", got, tc.marks)
			}
			if v.Kind != KindNone {
				t.Errorf("a log without a failure: %s", v.Kind)
			}
			checkStep(t, v, tc.atEnd)
			// An OOM after a line fails in that line's phase, at the step reached.
			at := func(line int) Verdict {
				return classifyString(t, strings.Join(ls[:line], "")+modernOOM+"\n", ClassifierOptions{})
			}
			if tc.valLine > 0 {
				v := at(tc.valLine)
				if v.Kind != KindGPUOOM || v.Phase != PhaseVal {
					t.Errorf("OOM after line %d: %s in %q, want gpu_oom in val", tc.valLine, v.Kind, v.Phase)
				}
				checkStep(t, v, tc.atVal)
			}
			v = at(tc.trainLine)
			if v.Kind != KindGPUOOM || v.Phase != PhaseTrain {
				t.Errorf("OOM after line %d: %s in %q, want gpu_oom in train", tc.trainLine, v.Kind, v.Phase)
			}
		})
	}
}

// A sanity check before training is validation, but a training OOM after
// it is in training, and no step comes from its bar.
func TestSanityCheckThenTrainOOM(t *testing.T) {
	for _, bar := range []string{
		"Sanity Checking DataLoader 0:  50%|█████     | 1/2 [00:00<00:00,  3.91it/s]",
		"Sanity Checking ━━━━━━━━━━━━━━━━━━━━╸━━━━━━━━━━━━━━━━━━━ 1/2 0:00:00 • 0:00:01 3.91it/s",
	} {
		log := bar + "\nEpoch 0:   0%|          | 0/120 [00:00<?, ?it/s]\n" + modernOOM + "\n"
		v := classifyString(t, log, ClassifierOptions{})
		if v.Kind != KindGPUOOM || v.Phase != PhaseTrain {
			t.Errorf("%s in %q, want gpu_oom in train", v.Kind, v.Phase)
		}
		checkStep(t, v, stepWant{0, StepInEpoch, 120, 0})
		// An OOM inside the sanity check is in validation, with no step.
		v = classifyString(t, bar+"\n"+modernOOM+"\n", ClassifierOptions{})
		if v.Kind != KindGPUOOM || v.Phase != PhaseVal {
			t.Errorf("%s in %q, want gpu_oom in val", v.Kind, v.Phase)
		}
		checkStep(t, v, stepWant{-1, StepNone, -1, -1})
	}
}

// docRow is one example of docs/classifier.md's table of phase lines.
var docRow = regexp.MustCompile("^\\| ([^|]+) \\| `(.+)` \\| (train|val|—) \\| (.+) \\|$")

// docStep reads the table's step column: "—", "epoch 3", "12 global",
// "23/50 in_epoch, epoch 0".
var docStep = regexp.MustCompile(`^(?:(\d+)(?:/(\d+))? (global|in_epoch))?(?:,? ?epoch (\d+))?$`)

// Every example line of the documentation's table of frameworks' phase lines
// is classified as the table says.
func TestDocumentedPhaseLines(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "classifier.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "### Phase lines by framework")
	if i < 0 {
		t.Fatal(`docs/classifier.md has no "### Phase lines by framework" section`)
	}
	rows := 0
	for _, l := range strings.Split(doc[i:], "\n")[1:] {
		if strings.HasPrefix(l, "#") {
			break
		}
		m := docRow.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		rows++
		line := strings.ReplaceAll(m[2], `\|`, "|")
		want := stepWant{-1, StepNone, -1, -1}
		if m[4] != "—" {
			s := docStep.FindStringSubmatch(m[4])
			if s == nil {
				t.Errorf("%s: step column %q unreadable", m[1], m[4])
				continue
			}
			num := func(x string) int64 {
				if x == "" {
					return -1
				}
				v, _ := strconv.ParseInt(x, 10, 64)
				return v
			}
			want = stepWant{num(s[1]), StepKind(s[3]), num(s[2]), num(s[4])}
		}
		phase := Phase(m[3])
		if m[3] == "—" {
			phase = PhaseNone
		}
		t.Run(m[1], func(t *testing.T) {
			v := classifyString(t, line+"\n", ClassifierOptions{})
			if v.Phase != phase {
				t.Errorf("%q: phase %q, the doc says %q", line, v.Phase, phase)
			}
			checkStep(t, v, want)
		})
	}
	if rows < 30 {
		t.Errorf("only %d example rows found in the table", rows)
	}
}

// A traceback's frames name the phase where the framework printed no marker
// before the failure: the deepest frame that names one decides.
func TestTracebackFramesNamePhase(t *testing.T) {
	megatron := ` [2026-11-25 09:10:00.000001] iteration     2500/   40000 | consumed samples:       640000 | lm loss: 2.871190E+00 |
[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/megatron-lm/pretrain_gpt.py", line 331, in <module>
[rank3]:     pretrain(
[rank3]:   File "/workspace/megatron-lm/megatron/training/training.py", line 812, in pretrain
[rank3]:     iteration, num_floating_point_operations_so_far = train(
[rank3]:   File "/workspace/megatron-lm/megatron/training/training.py", line 2011, in train
[rank3]:     evaluate_and_print_results(prefix, forward_step_func,
[rank3]:   File "/workspace/megatron-lm/megatron/training/training.py", line 2301, in evaluate_and_print_results
[rank3]:     evaluate(forward_step_func, data_iterator, model,
[rank3]:   File "/workspace/megatron-lm/megatron/training/training.py", line 2210, in evaluate
[rank3]:     loss_dicts = forward_backward_func(
[rank3]:   File "/workspace/megatron-lm/megatron/core/pipeline_parallel/schedules.py", line 470, in forward_backward_no_pipelining
[rank3]:     output_tensor, num_tokens = forward_step(
`
	nanogpt := `iter 1990: loss 1.9124, time 311.21ms, mfu 38.02%
Traceback (most recent call last):
  File "/home/user/nanoGPT/train.py", line 264, in <module>
    losses = estimate_loss()
  File "/home/user/venv/lib/python3.11/site-packages/torch/utils/_contextlib.py", line 116, in decorate_context
    return func(*args, **kwargs)
  File "/home/user/nanoGPT/train.py", line 221, in estimate_loss
    logits, loss = model(X, Y)
  File "/home/user/nanoGPT/model.py", line 180, in forward
    x = block(x)
`
	lightningTrain := `Validation DataLoader 0: 100%|██████████| 20/20 [00:01<00:00, 12.31it/s]
Traceback (most recent call last):
  File "/opt/app/train.py", line 88, in <module>
    trainer.fit(model, dm)
  File "/opt/venv/lib/python3.11/site-packages/lightning/pytorch/loops/training_epoch_loop.py", line 250, in advance
    batch_output = self.automatic_optimization.run(trainer.optimizers[0], batch_idx, kwargs)
  File "/opt/venv/lib/python3.11/site-packages/lightning/pytorch/loops/optimization/automatic.py", line 315, in training_step
    training_step_output = call._call_strategy_hook(trainer, "training_step", *kwargs.values())
  File "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward
    torch.autograd.backward(
`
	hfEval := `  Total optimization steps = 750
 14%|█▍        | 101/750 [01:10<12:44,  1.18s/it]
Traceback (most recent call last):
  File "/srv/job/run_clm.py", line 640, in main
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
  File "/srv/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2325, in _inner_training_loop
    self._maybe_log_save_evaluate(
  File "/srv/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3072, in evaluate
    output = eval_loop(
  File "/srv/venv/lib/python3.11/site-packages/transformers/trainer.py", line 4230, in prediction_step
    outputs = model(**inputs)
`
	for _, tc := range []struct {
		name  string
		log   string
		phase Phase
		step  stepWant
	}{
		{"Megatron-LM evaluation without verbose lines", megatron, PhaseVal, stepWant{2500, StepGlobal, 40000, -1}},
		{"nanoGPT estimate_loss", nanogpt, PhaseVal, stepWant{1990, StepGlobal, -1, -1}},
		{"Lightning training step after a validation", lightningTrain, PhaseTrain, stepWant{-1, StepNone, -1, -1}},
		{"Hugging Face evaluation without its banner", hfEval, PhaseVal, stepWant{101, StepGlobal, 750, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classifyString(t, tc.log+modernOOM+"\n", ClassifierOptions{})
			if v.Kind != KindGPUOOM || v.Phase != tc.phase {
				t.Errorf("%s in %q, want gpu_oom in %q", v.Kind, v.Phase, tc.phase)
			}
			checkStep(t, v, tc.step)
			// Without the frames, the phase is the one printed before.
			var kept []string
			for _, l := range strings.SplitAfter(tc.log, "\n") {
				if !strings.Contains(l, `File "`) {
					kept = append(kept, l)
				}
			}
			if v := classifyString(t, strings.Join(kept, "")+modernOOM+"\n", ClassifierOptions{}); v.Phase == tc.phase {
				t.Errorf("without its frames the log is in %q already: the case shows nothing", v.Phase)
			}
		})
	}
}
