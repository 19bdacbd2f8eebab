// Command chatty is the fake training job of the benchmarks in bench/. It
// writes training-style output: short log lines and tqdm-style progress bars
// redrawn with '\r'.
//
// Flood mode (the default) writes -mb MiB of it as fast as it can, in -buf
// byte writes, then "\ndone\n". It is the load of bench/passthrough.sh, which
// measures how much gpuguard slows the output of a job that runs under it.
// The text is generated once and written over and over, so that chatty itself
// costs little CPU. The output is a pure function of -mb and -buf: two runs
// with the same flags write the same bytes, which is what lets the benchmark
// check that gpuguard passed every byte through, in order. With -onlcr it
// writes "\r\n" for every '\n', which is what the same output looks like after
// a pty's line discipline (ONLCR): the stream gpuguard and script(1) read
// from a pty master.
//
// Paced mode (-for D) behaves like a real job for duration D: a tqdm bar
// redrawn -bar-hz times a second and a log line -line-hz times a second,
// then "done". It is the load of bench/footprint.sh, which measures
// gpuguard's own CPU time and memory while it supervises such a job.
//
// chatty exits 1 with a message on stderr when a write fails (its reader
// went away), 2 on bad flags.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	mb := flag.Int("mb", 400, "flood mode: MiB to write")
	chunk := flag.Int("buf", 4096, "flood mode: bytes per write (a program's stdio buffer)")
	onlcr := flag.Bool("onlcr", false, `write "\r\n" for each '\n', as a pty shows the output`)
	dur := flag.Duration("for", 0, "paced mode: behave like a real job for this long")
	barHz := flag.Float64("bar-hz", 10, "paced mode: progress bar redraws per second")
	lineHz := flag.Float64("line-hz", 1, "paced mode: log lines per second")
	flag.Parse()
	if *mb < 0 || *chunk <= 0 || *barHz <= 0 || *lineHz <= 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "chatty: bad flags (see -h): -mb >= 0, -buf > 0, -bar-hz > 0, -line-hz > 0, no arguments")
		os.Exit(2)
	}
	var err error
	if *dur > 0 {
		err = paced(os.Stdout, *dur, *barHz, *lineHz, *onlcr)
	} else {
		err = flood(os.Stdout, int64(*mb)<<20, *chunk, *onlcr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatty:", err)
		os.Exit(1)
	}
}

// block returns 1 MiB (a little more) of training-style output.
func block() []byte {
	var b bytes.Buffer
	bar := strings.Repeat("#", 40)
	for step := 0; b.Len() < 1<<20; step++ {
		if step%4 == 3 {
			k := step % 41
			fmt.Fprintf(&b, "\rEpoch %d: %3d%%|%-40s| %d/%d [00:%02d<00:10, 97.3it/s, loss=%.4f]",
				step/1000, k*100/40, bar[:k], k, 40, step%60, 1/float64(step+1))
			if k == 40 {
				b.WriteString("\n")
			}
		} else {
			fmt.Fprintf(&b, "step=%d loss=%.6f lr=%.2e grad_norm=%.3f tokens/s=%d\n",
				step, 2.5/float64(step%1000+1), 3e-4, float64(step%97)/10, 12000+step%5000)
		}
	}
	return b.Bytes()
}

// flood writes to w n bytes of block() over and over (n bytes before any "\r"
// -onlcr adds), chunk bytes per write, then "\ndone\n".
func flood(w io.Writer, n int64, chunk int, onlcr bool) error {
	data := block()
	out := make([]byte, 0, 2*chunk)
	for left := n; left > 0; {
		for off := 0; off < len(data) && left > 0; off += chunk {
			p := data[off:min(off+chunk, len(data))]
			if int64(len(p)) > left {
				p = p[:left]
			}
			left -= int64(len(p))
			if onlcr {
				out = crlf(out[:0], p)
				p = out
			}
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
	}
	tail := []byte("\ndone\n")
	if onlcr {
		tail = crlf(nil, tail)
	}
	_, err := w.Write(tail)
	return err
}

// crlf appends p to dst with each '\n' written as "\r\n".
func crlf(dst, p []byte) []byte {
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return append(dst, p...)
		}
		dst = append(append(dst, p[:i]...), '\r', '\n')
		p = p[i+1:]
	}
}

// paced writes to w a progress bar barHz times a second and a log line lineHz
// times a second for d, each with its own write(2) as tqdm and logging do,
// then "done".
func paced(w io.Writer, d time.Duration, barHz, lineHz float64, onlcr bool) error {
	nl := "\n"
	if onlcr {
		nl = "\r\n"
	}
	bars := time.NewTicker(time.Duration(float64(time.Second) / barHz))
	defer bars.Stop()
	logs := time.NewTicker(time.Duration(float64(time.Second) / lineHz))
	defer logs.Stop()
	end := time.After(d)
	start := time.Now()
	total := int(d.Seconds() * barHz)
	bar := strings.Repeat("#", 30)
	it, step := 0, 0
	for {
		var s string
		select {
		case <-end:
			_, err := fmt.Fprintf(w, "%sdone%s", nl, nl)
			return err
		case <-bars.C:
			it++
			el := time.Since(start)
			k := min(it*30/max(total, 1), 30)
			s = fmt.Sprintf("\rEpoch 0: %3d%%|%-30s| %d/%d [%02d:%02d<00:00, %.2fit/s, loss=%.4f, v_num=0]",
				min(it*100/max(total, 1), 100), bar[:k], it, total,
				int(el.Minutes()), int(el.Seconds())%60, barHz, 2.5/float64(it+1))
		case <-logs.C:
			step++
			s = fmt.Sprintf("\r{'loss': %.4f, 'grad_norm': %.3f, 'learning_rate': %.2e, 'epoch': %.2f}%s",
				2.5/float64(step+1), float64(step%97)/10, 3e-4, float64(step)/100, nl)
		}
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
	}
}
