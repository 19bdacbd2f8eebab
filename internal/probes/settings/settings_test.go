package settings

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var knobs = []Key{
	{Knob: "batch_size", Spellings: []string{"--batch-size", "-b"}},
	{Knob: "workers", Spellings: []string{"--num_workers", "-j"}},
	{Knob: "lr", Spellings: []string{"LEARNING_RATE"}},
	{Knob: "val_crop_size", Spellings: []string{"--val-crop-size"}},
}

func TestAppend(t *testing.T) {
	r := New(knobs)
	for _, tc := range []struct {
		line string
		want []string // knob=value, in the order of the knobs
	}{
		// The structures trainers echo.
		{"Namespace(batch_size=16, num_workers=4, lr=0.1, val_crop_size=None)", []string{"batch_size=16", "workers=4", "val_crop_size=None"}},
		{"Namespace(val_batch_size=64, batch_size=16)", []string{"batch_size=16"}},
		{"batch_size=16", []string{"batch_size=16"}},
		{"  batch_size: 16", []string{"batch_size=16"}},
		{"batch-size = 16", []string{"batch_size=16"}},
		{`{"batch_size": 16, "num_workers": 2}`, []string{"batch_size=16", "workers=2"}},
		{"{'batch_size': 16, 'learning_rate': 0.001}", []string{"batch_size=16", "lr=0.001"}},
		{"config.train.batch_size=24", []string{"batch_size=24"}},
		{"  Instantaneous batch size per device = 32", []string{"batch_size=32"}},
		{"Restoring train_batch_size=32 from the checkpoint", []string{"batch_size=32"}},
		{"per_device_train_batch_size=8,", []string{"batch_size=8"}},
		{"batch size per device = 16", []string{"batch_size=16"}},
		{"Batch Size: 12.", []string{"batch_size=12"}},
		{"engine/trainer: task=detect, mode=train, model=yolov8n.pt, batch=16, workers=8, imgsz=640", []string{"workers=8"}},
		{`BATCH_SIZE="16"`, []string{"batch_size=16"}},
		{"train_micro_batch_size_per_gpu: 4", []string{"batch_size=4"}},
		{"hparams: {'batch_size': 16} then batch_size=32", []string{"batch_size=16"}},
		// Traps: other settings, other counts, paths, prose.
		{"val_batch_size=64", nil},
		{"eval batch size = 64", nil},
		{"per_device_eval_batch_size=8,", nil},
		{"effective batch size: 64", nil},
		{"  Total train batch size (w. parallel, distributed & accumulation) = 64", nil},
		{"global_batch_size=256", nil},
		{"batch_size_total=64", nil},
		{"max_batch_size: 128", nil},
		{"microbatch_size=4", nil},
		{"saved to runs/batch_size=32/ckpt.pt", nil},
		{"loading /data/batch_size:32", nil},
		{"lr=1e-4_batch_size=32", nil},
		{"batch size 16", nil},
		{"assert batch_size == 16", nil},
		{"the batch size was reduced", nil},
		{"batch_size:", nil},
		{"step 10 loss 2.5", nil},
		{"b=3 j=4", nil},
	} {
		var got []string
		for _, s := range r.Append(nil, []byte(tc.line)) {
			got = append(got, s.Knob+"="+s.Value)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got  %q\n want %q", tc.line, got, tc.want)
		}
	}
}

// The knob's name is one spelling; the policy's flag and environment
// variable are others; the Trainer's long flag is found in short echoes.
func TestSpellings(t *testing.T) {
	r := New([]Key{{Knob: "bs", Spellings: []string{"--per_device_train_batch_size"}}, {Knob: "accum", Spellings: []string{"--gradient_accumulation_steps"}}})
	got := r.Append(nil, []byte("Restoring train_batch_size=32 from the checkpoint"))
	if len(got) != 1 || got[0] != (Seen{Knob: "bs", Value: "32", Col: 16}) {
		t.Errorf("got %+v", got)
	}
	got = r.Append(nil, []byte("  Gradient Accumulation steps = 2"))
	if len(got) != 1 || got[0].Knob != "accum" || got[0].Value != "2" {
		t.Errorf("got %+v", got)
	}
	// Ultralytics' knob is batch=; its banner is key=value words.
	u := New([]Key{{Knob: "batch", Spellings: []string{"batch"}}})
	got = u.Append(nil, []byte("engine/trainer: task=detect, mode=train, model=yolov8n.pt, data=coco128.yaml, epochs=3, batch=16, imgsz=640"))
	if len(got) != 1 || got[0].Value != "16" {
		t.Errorf("ultralytics: %+v", got)
	}
	if got := r.Append(nil, []byte("bs=4")); len(got) != 0 {
		t.Errorf("a two-letter spelling matched: %+v", got)
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		set, used      string
		same, compared bool
	}{
		{"16", "16", true, true},
		{"16", "16.0", true, true},
		{"16", "32", false, true},
		{"1e-4", "0.0001", true, true},
		{"16", "auto", false, false},
		{"auto", "16", false, false},
		{"", "None", true, true},
		{"true", "True", true, true},
		{"16-mixed", "16-mixed", true, true},
		{"bf16", "fp16", false, true},
	} {
		same, compared := Compare(tc.set, tc.used)
		if same != tc.same || compared != tc.compared {
			t.Errorf("Compare(%q, %q) = %v, %v; want %v, %v", tc.set, tc.used, same, compared, tc.same, tc.compared)
		}
	}
}

// Lines that say nothing of a knob, most of a log, cost nothing.
func TestNoAllocationOnOtherLines(t *testing.T) {
	r := New(knobs)
	buf := make([]Seen, 0, 4)
	for _, line := range []string{
		"Epoch 3: 100%|██████████| 500/500 [01:02<00:00, 8.0it/s, loss=0.412]",
		"val_batch_size=64 effective batch size: 64 Total train batch size = 64",
		"saved to runs/batch_size=32/ckpt.pt",
		"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.",
	} {
		b := []byte(line)
		if n := testing.AllocsPerRun(100, func() { buf = r.Append(buf[:0], b) }); n != 0 || len(buf) != 0 {
			t.Errorf("%q: %v allocations, %d values", line, n, len(buf))
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	r := New(knobs)
	for _, line := range []string{
		"Epoch 3: 100%|██████████| 500/500 [01:02<00:00, 8.0it/s, loss=0.412]",
		"Namespace(batch_size=16, num_workers=4, lr=0.1, val_crop_size=None)",
	} {
		b.Run(fmt.Sprintf("%.20s", line), func(b *testing.B) {
			data := []byte(line)
			buf := make([]Seen, 0, 4)
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				buf = r.Append(buf[:0], data)
			}
		})
	}
}

// Whatever the line, a value read is non-empty text of the line, at the
// place the key was found.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"Namespace(batch_size=16)", "batch size per device = 32", "x_batch_size:", "batch_size='", "BATCH SIZE:  \"1\"", "batch_size=16/"} {
		f.Add(s)
	}
	r := New(knobs)
	f.Fuzz(func(t *testing.T, line string) {
		for _, s := range r.Append(nil, []byte(line)) {
			if s.Value == "" || !strings.Contains(line, s.Value) || s.Col < 0 || s.Col >= len(line) {
				t.Errorf("%q: %+v", line, s)
			}
		}
	})
}
