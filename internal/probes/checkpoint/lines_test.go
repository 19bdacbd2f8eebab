package checkpoint

import "testing"

func TestSavedPath(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"saved checkpoint ckpt/step_50.pt", "ckpt/step_50.pt"},
		{"Saved checkpoint to /data/run/ckpt-100.pt.", "/data/run/ckpt-100.pt"},
		{"[INFO|trainer.py:3984] 2024-05-01 >> Saving model checkpoint to out/checkpoint-500", "out/checkpoint-500"},
		{"Epoch 0, global step 50: 'val_loss' reached 0.51 (best 0.51), saving model to '/w/lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt' as top 1", "/w/lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt"},
		{"saving model to 'my runs/a b.ckpt'", "my runs/a b.ckpt"},
		{"step 3 loss 0.5", ""},
		{"no checkpoint saved", ""},
	} {
		got, ok := SavedPath([]byte(tc.line))
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("SavedPath(%q) = %q, %v; want %q", tc.line, got, ok, tc.want)
		}
	}
}

func TestSavingLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"Saving model checkpoint to out/checkpoint-500", true},
		{"[rank0]: saving checkpoint at step 1000", true},
		{"writing state_dict to /ckpt/model.pt", true},
		{"checkpoint: save every 500 steps", true},
		{"step 3 loss 0.5", false},
		{"model loaded from hub", false},
	} {
		if got := SavingLine([]byte(tc.line)); got != tc.want {
			t.Errorf("SavingLine(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}
