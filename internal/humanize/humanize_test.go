package humanize

import "testing"

func TestBytes(t *testing.T) {
	cases := map[uint64]string{
		0:         "0 B",
		1023:      "1023 B",
		1024:      "1 KiB",
		150 << 20: "150 MiB",
		3 << 29:   "1.50 GiB",
		2 << 40:   "2.00 TiB",
		1<<30 - 1: "1024 MiB",
	}
	for b, want := range cases {
		if got := Bytes(b); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestGiB(t *testing.T) {
	cases := map[int64]string{
		0:         "0 GiB",
		20 << 20:  "0.02 GiB (20.00 MiB)",
		100 << 20: "0.10 GiB",
		9 << 30:   "9.00 GiB",
	}
	for b, want := range cases {
		if got := GiB(b); got != want {
			t.Errorf("GiB(%d) = %q, want %q", b, got, want)
		}
	}
	if got := GiBFigure(5 << 29); got != "2.50" {
		t.Errorf("GiBFigure = %q", got)
	}
}
