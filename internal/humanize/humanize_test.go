package humanize

import (
	"math"
	"testing"
)

func TestSize(t *testing.T) {
	r := func(f float64) int64 { return int64(math.Round(f)) }
	for b, want := range map[int64]string{
		0:                  "0 bytes",
		512:                "512 bytes",
		1023:               "1023 bytes",
		1024:               "1.00 KiB",
		812 << 10:          "812 KiB",
		40 << 10:           "40.0 KiB",
		12 << 20:           "12.0 MiB",
		r(3.25 * mib):      "3.25 MiB",
		r(194.56 * mib):    "195 MiB",
		150 << 20:          "150 MiB",
		1<<30 - 1:          "1024 MiB",
		1 << 30:            "1.00 GiB",
		3 << 29:            "1.50 GiB",
		r(15.82 * gib):     "15.82 GiB",
		r(2.5 * (1 << 40)): "2.50 TiB",
		2 << 50:            "2.00 PiB",
		1 << 62:            "4.00 EiB",
		math.MaxInt64:      "8.00 EiB",
		-(12 << 20):        "-12.0 MiB",
		-(3 << 29):         "-1.50 GiB",
		math.MinInt64:      "-8.00 EiB",
	} {
		if got := Size(b); got != want {
			t.Errorf("Size(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestBytes(t *testing.T) {
	for b, want := range map[uint64]string{
		150 << 20:      "150 MiB",
		2 << 40:        "2.00 TiB",
		math.MaxUint64: "8.00 EiB",
	} {
		if got := Bytes(b); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", b, got, want)
		}
	}
}
