package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/rogpeppe/go-internal/testscript"
)

// webhook FILE starts a webhook on 127.0.0.1 for the rest of the script,
// sets $WEBHOOK to its URL, and appends each body posted to it to FILE,
// one a line.
func cmdWebhook(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: webhook FILE")
	}
	file := ts.MkAbs(args[0])
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		f.Write(append(body, '\n'))
		f.Close()
	}))
	ts.Defer(srv.Close)
	ts.Setenv("WEBHOOK", srv.URL+"/hook")
}

// prom FILE NAME [LABEL=VALUE...] VALUE checks, with Prometheus' own text
// parser, that FILE has a sample of NAME with exactly those labels (the run
// label aside, unless given) and that value.
func cmdProm(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: prom FILE NAME [LABEL=VALUE...] VALUE")
	}
	f, err := os.Open(ts.MkAbs(args[0]))
	ts.Check(err)
	defer f.Close()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	want, err := strconv.ParseFloat(args[len(args)-1], 64)
	ts.Check(err)
	labels := args[2 : len(args)-1]
	withRun := strings.Contains(" "+strings.Join(labels, " "), " run=")
	fam := fams[args[1]]
	if fam == nil {
		ts.Fatalf("%s: no metric %s", args[0], args[1])
	}
	for _, m := range fam.GetMetric() {
		var got []string
		for _, l := range m.GetLabel() {
			if l.GetName() != "run" || withRun { // every sample names its run
				got = append(got, l.GetName()+"="+l.GetValue())
			}
		}
		if strings.Join(got, " ") != strings.Join(labels, " ") {
			continue
		}
		var v float64
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			v = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			v = m.GetGauge().GetValue()
		default:
			v = m.GetUntyped().GetValue()
		}
		if v != want {
			ts.Fatalf("%s: %s%v = %v, want %v", args[0], args[1], labels, v, want)
		}
		return
	}
	ts.Fatalf("%s: no %s with labels %v", args[0], args[1], labels)
}
