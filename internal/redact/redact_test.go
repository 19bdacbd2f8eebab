package redact

import (
	"slices"
	"strings"
	"testing"
	"unicode"
)

func TestArgv(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// Secret flags, both forms.
		{"train.py --api-key=s3cr3t", "train.py --api-key=***"},
		{"train.py --token abc --lr 1e-4", "train.py --token *** --lr 1e-4"},
		{"train.py --password hunter2", "train.py --password ***"},
		{"train.py --hf_token hf_abc", "train.py --hf_token ***"},
		{"train.py --wandb-api-key=k", "train.py --wandb-api-key=***"},
		{"train.py --apiKey k", "train.py --apiKey ***"},
		{"train.py --HFToken k", "train.py --HFToken ***"},
		{"train.py -token k", "train.py -token ***"},
		{"train.py --db-pass pw --auth u:p", "train.py --db-pass *** --auth ***"},
		{"train.py --private-key=k --secret-access-key k --client_secret s", "train.py --private-key=*** --secret-access-key *** --client_secret ***"},
		{"train.py --credentials c --passphrase p --api-keys a,b", "train.py --credentials *** --passphrase *** --api-keys ***"},
		{"train.py --model.api_key=k", "train.py --model.api_key=***"},
		// The value is taken whatever it looks like, but a flag is not a value.
		{"train.py --token --lr 1", "train.py --token --lr 1"},
		{"train.py --token", "train.py --token"},
		{"train.py --token=", "train.py --token="},
		// Switches: the next word is an argument of its own; = still masks.
		{"train.py --use_auth_token data.txt", "train.py --use_auth_token data.txt"},
		{"train.py --no-auth data.txt", "train.py --no-auth data.txt"},
		{"train.py --use_auth_token=hf_abc", "train.py --use_auth_token=***"},
		// Traps: names whose last word is not a secret.
		{"train.py --max-tokens 512 --max_new_tokens 64 --num-tokens 9", "train.py --max-tokens 512 --max_new_tokens 64 --num-tokens 9"},
		{"train.py --tokenizer gpt2 --tokenizer_name gpt2", "train.py --tokenizer gpt2 --tokenizer_name gpt2"},
		{"train.py --keyframes 4 --key x --sort-key y", "train.py --keyframes 4 --key x --sort-key y"},
		{"train.py --auth-timeout 5 --token-file /run/tok --secret-sauce yes", "train.py --auth-timeout 5 --token-file /run/tok --secret-sauce yes"},
		{"train.py --max-token 5 --pad-token <pad> --eos_token </s> --bos-token <s>", "train.py --max-token 5 --pad-token <pad> --eos_token </s> --bos-token <s>"},
		{"train.py --bypass 1 --compass 2 --passes 3", "train.py --bypass 1 --compass 2 --passes 3"},
		{"train.py --access-key-id AKIA", "train.py --access-key-id AKIA"},
		{"train.py -p 8080", "train.py -p 8080"},
		// URL credentials, also inside a larger word.
		{"train.py https://u:pw@host/x", "train.py https://u:***@host/x"},
		{"train.py --data=s3://k:s@bucket/p", "train.py --data=s3://k:***@bucket/p"},
		{"pip install git+https://ghp_abc@github.com/o/r.git", "pip install git+https://***@github.com/o/r.git"},
		{"train.py https://u:p@ss@host/x?q=a@b", "train.py https://u:***@host/x?q=a@b"},
		{"train.py https://host/a@b mailto:x@y.z", "train.py https://host/a@b mailto:x@y.z"},
		{"train.py --endpoint=http://a:b@h1,http://c:d@h2", "train.py --endpoint=http://a:***@h1,http://c:***@h2"},
		// KEY=VALUE words.
		{"env HF_TOKEN=zzz WANDB_API_KEY=w AWS_SECRET_ACCESS_KEY=a PGPASSWORD=p python t.py", "env HF_TOKEN=*** WANDB_API_KEY=*** AWS_SECRET_ACCESS_KEY=*** PGPASSWORD=*** python t.py"},
		{"python t.py +db.password=p ~auth.token=t trainer.max_tokens=5 CUDA_VISIBLE_DEVICES=0", "python t.py +db.password=*** ~auth.token=*** trainer.max_tokens=5 CUDA_VISIBLE_DEVICES=0"},
		{"python t.py AWS_ACCESS_KEY_ID=AKIA TOKENIZERS_PARALLELISM=false", "python t.py AWS_ACCESS_KEY_ID=AKIA TOKENIZERS_PARALLELISM=false"},
		{"python t.py HF_ENDPOINT=https://u:p@hub", "python t.py HF_ENDPOINT=https://u:***@hub"},
	} {
		got := strings.Join(Argv(strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("Argv(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestArgvScriptWord(t *testing.T) {
	in := []string{"sh", "-c", "python train.py --token abc 'https://u:pw@h/x'"}
	want := []string{"sh", "-c", "python train.py --token *** 'https://u:***@h/x'"}
	if got := Argv(in); !slices.Equal(got, want) {
		t.Errorf("Argv(%q) = %q, want %q", in, got, want)
	}
	if in[2] != "python train.py --token abc 'https://u:pw@h/x'" {
		t.Errorf("Argv changed its argument: %q", in)
	}
	// A value holding spaces is masked whole.
	if got := Argv([]string{"t", "--password", "a b c"}); !slices.Equal(got, []string{"t", "--password", Mask}) {
		t.Errorf("got %q", got)
	}
	if Argv(nil) != nil {
		t.Error("Argv(nil) is not nil")
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"attempt 2: python train.py --api-key=s3cr3t --token abc", "attempt 2: python train.py --api-key=*** --token ***"},
		{`notify command "curl -H 'Authorization: Bearer tok123' https://h/x" failed`, `notify command "curl -H 'Authorization: Bearer ***' https://h/x" failed`},
		{"curl -H 'X-Api-Key: k1' -H \"Authorization: token t2\" -u user:pw https://a:b@h", "curl -H 'X-Api-Key: ***' -H \"Authorization: token ***\" -u user:pw https://a:***@h"},
		{"Bearer abc, then more", "Bearer ***, then more"},
		{"cannot run (HF_TOKEN=zzz) here", "cannot run (HF_TOKEN=***) here"},
		{"  spacing\tkept  --password\n x ", "  spacing\tkept  --password\n *** "},
		{"the tokenizer needs --max-tokens 512; auth: ok", "the tokenizer needs --max-tokens 512; auth: ***"},
		{"no secrets here: batch_size 8→4", "no secrets here: batch_size 8→4"},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

func TestSecretName(t *testing.T) {
	yes := []string{"--token", "--hf_token", "--api-key", "apiKey", "HF_TOKEN", "GITHUB_TOKEN", "PGPASSWORD", "--passwd", "--client-secret", "--auth", "--basic-auth", "SSH_PRIVATE_KEY", "--cookie", "AZURE_STORAGE_KEY", "--authtoken"}
	no := []string{"--tokens", "--max-tokens", "--tokenizer", "--keyframes", "--key", "--auth-timeout", "--token-file", "--secret-sauce", "--pad-token", "--p", "-p", "--password-length", "AWS_ACCESS_KEY_ID", "--num-passes", ""}
	for _, n := range yes {
		if !SecretName(n) {
			t.Errorf("SecretName(%q) = false, want true", n)
		}
	}
	for _, n := range no {
		if SecretName(n) {
			t.Errorf("SecretName(%q) = true, want false", n)
		}
	}
}

func TestOff(t *testing.T) {
	off = true
	defer func() { off = false }()
	in := []string{"t", "--token", "abc", "https://u:p@h"}
	if got := Argv(in); !slices.Equal(got, in) {
		t.Errorf("off: Argv = %q", got)
	}
	if got := Text("--token abc"); got != "--token abc" {
		t.Errorf("off: Text = %q", got)
	}
	if Enabled() {
		t.Error("off: Enabled")
	}
}

// FuzzArgv checks what holds for every command line: the result has as
// many words; redacting again changes nothing; a word is changed only where
// a secret was (it then holds the mask); and no word longer than the mask
// that was masked survives anywhere in the result.
func FuzzArgv(f *testing.F) {
	for _, s := range []string{
		"train.py --api-key=s3cr3t --token abc https://u:pw@host/x HF_TOKEN=zzz",
		"--max-tokens 512 --tokenizer gpt2",
		"sh\x00-c\x00curl -H 'Authorization: Bearer t' https://a:b@h",
		"x://@@:@", "git+https://tok@github.com/o/r", "--use_auth_token --token",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := strings.Split(s, "\x00")
		out := Argv(in)
		if len(out) != len(in) {
			t.Fatalf("Argv(%q) has %d words, want %d", in, len(out), len(in))
		}
		if again := Argv(out); !slices.Equal(again, out) {
			t.Fatalf("not idempotent: %q → %q → %q", in, out, again)
		}
		for i := range in {
			if out[i] != in[i] && !strings.Contains(out[i], Mask) {
				t.Fatalf("word %d changed without a mask: %q → %q", i, in[i], out[i])
			}
		}
		if got := Text(strings.Join(out, " ")); got != strings.Join(out, " ") && !strings.Contains(got, Mask) {
			t.Fatalf("Text changed %q without a mask: %q", out, got)
		}
	})
}

// BenchmarkArgv: a typical training command, redacted once per attempt and
// per event that carries it.
func BenchmarkArgv(b *testing.B) {
	argv := strings.Fields("torchrun --nproc-per-node 8 train.py --model llama-7b --batch-size 16 --max-tokens 4096 --hf_token hf_abc --data s3://k:s@bucket/ds --lr 3e-4 WANDB_API_KEY=w")
	for b.Loop() {
		Argv(argv)
	}
}

// BenchmarkText: a line of free text with no secret (a failure line from
// the job's output, as the journal records it).
func BenchmarkText(b *testing.B) {
	line := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB is free."
	for b.Loop() {
		Text(line)
	}
}

// FuzzSecretHidden: whatever the secret, it is masked in each of the
// rule's places.
func FuzzSecretHidden(f *testing.F) {
	for _, s := range []string{"s3cr3t", "abc", "***x", "a=b", "%41", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if v == "" || v == Mask || strings.HasPrefix(v, "-") || strings.ContainsAny(v, "/?#@:\"'<>`") || strings.ContainsFunc(v, unicode.IsSpace) {
			return
		}
		in := []string{"train.py", "--api-key=" + v, "--token", v, "HF_TOKEN=" + v, "https://u:" + v + "@h/x"}
		want := []string{"train.py", "--api-key=***", "--token", Mask, "HF_TOKEN=***", "https://u:***@h/x"}
		if got := Argv(in); !slices.Equal(got, want) {
			t.Fatalf("Argv(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(v, "([{<)]}>,;") {
			return // Text keeps the brackets and punctuation around a word
		}
		if got, w := Text(strings.Join(in, " ")), strings.Join(want, " "); got != w {
			t.Fatalf("Text(%q) = %q, want %q", strings.Join(in, " "), got, w)
		}
	})
}
