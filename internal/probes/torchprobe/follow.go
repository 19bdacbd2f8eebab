package torchprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Follower reads the records the probed processes append to their files in
// one directory, each complete line once.
type Follower struct {
	dir     string
	offsets map[string]int64
	partial map[string][]byte
}

// NewFollower follows the probe-*.jsonl files in dir.
func NewFollower(dir string) *Follower {
	return &Follower{dir: dir, offsets: map[string]int64{}, partial: map[string][]byte{}}
}

// Poll calls fn with each record written since the last Poll, file by file
// (files in name order). Lines that are not records are skipped.
func (f *Follower) Poll(fn func(Record)) {
	names, _ := filepath.Glob(filepath.Join(f.dir, "probe-*.jsonl"))
	sort.Strings(names)
	for _, name := range names {
		f.read(name, fn)
	}
}

func (f *Follower) read(name string, fn func(Record)) {
	file, err := os.Open(name)
	if err != nil {
		return
	}
	defer file.Close()
	if _, err := file.Seek(f.offsets[name], io.SeekStart); err != nil {
		return
	}
	data, err := io.ReadAll(io.LimitReader(file, 16<<20))
	if len(data) == 0 || err != nil {
		return
	}
	f.offsets[name] += int64(len(data))
	buf := append(f.partial[name], data...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		var r Record
		if json.Unmarshal(buf[:i], &r) == nil && r.Kind != "" {
			fn(r)
		}
		buf = buf[i+1:]
	}
	f.partial[name] = append([]byte(nil), buf...)
}

// Follow polls dir every interval until ctx is done, then once more, so
// that what was written before the end is read.
func Follow(ctx context.Context, dir string, interval time.Duration, fn func(Record)) {
	f := NewFollower(dir)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f.Poll(fn)
		select {
		case <-ctx.Done():
			f.Poll(fn)
			return
		case <-t.C:
		}
	}
}
