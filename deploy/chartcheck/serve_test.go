package chartcheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// sglmockBinary returns $SGLMOCK_BIN, or sglmock built from the repository.
func sglmockBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("SGLMOCK_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "sglmock")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sglmock")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sglmock: %v\n%s", err, out)
	}
	return bin
}

// The rendered pod's command, run here: sglmock serve with the container's
// arguments, its environment (the pod's IP is 127.0.0.1) and the
// ConfigMap's files where the volume mounts them. Then every path the
// chart points Kubernetes and Prometheus at must answer, and the server
// must be the one the values describe.
func TestServeRenderedPod(t *testing.T) {
	bin := sglmockBinary(t)
	help, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
	knowsKVEvents := strings.Contains(string(help), "-kv-events-config")

	for _, tt := range []struct {
		name, file        string
		wantModel         string
		wantProfile       string
		wantSpeedup       float64
		wantPageSize      int
		wantSeed          int
		wantCacheReport   bool
		wantMetricsSeries bool
	}{
		{"default", "", "sglmock/small-1b", "default", 1, 1, 1, false, true},
		{"all-on", "testdata/all-on.yaml", "sglmock/chartcheck", "chartcheck", 100, 16, 7, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := renderValueSet(t, tt.name, tt.file)
			pod := m.deployment.Spec.Template
			c := pod.Spec.Containers[0]
			args := podArgs(t, m, c)
			if !knowsKVEvents {
				args = dropFlag(args, "--kv-events-config")
			}
			// The image's entrypoint, on loopback, on a free port.
			args = append(append([]string{"serve", "--host", "127.0.0.1"}, args...), "--port=0")
			base, stop := startServer(t, bin, args)

			paths := []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path}
			if p := pod.Annotations["prometheus.io/path"]; p != "" {
				paths = append(paths, p)
			}
			if m.serviceMonitor != nil {
				paths = append(paths, m.serviceMonitor.Spec.Endpoints[0].Path)
			}
			for _, path := range paths {
				status, body := get(t, base+path)
				if status != http.StatusOK {
					t.Errorf("GET %s: %d %s", path, status, body)
				}
				if path == "/metrics" && tt.wantMetricsSeries && !strings.Contains(body, "\nsglang:") {
					t.Errorf("GET /metrics: no sglang: series")
				}
			}

			var info struct {
				ServedModelName   string `json:"served_model_name"`
				PageSize          int    `json:"page_size"`
				RandomSeed        int    `json:"random_seed"`
				EnableCacheReport bool   `json:"enable_cache_report"`
				Sim               struct {
					Profile string  `json:"profile"`
					Speedup float64 `json:"speedup"`
				} `json:"sim"`
			}
			status, body := get(t, base+"/server_info")
			if status != http.StatusOK {
				t.Fatalf("/server_info: %d %s", status, body)
			}
			if err := json.Unmarshal([]byte(body), &info); err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("model %s, profile %s, speedup %g, page size %d, seed %d, cache report %t",
				info.ServedModelName, info.Sim.Profile, info.Sim.Speedup, info.PageSize, info.RandomSeed, info.EnableCacheReport)
			want := fmt.Sprintf("model %s, profile %s, speedup %g, page size %d, seed %d, cache report %t",
				tt.wantModel, tt.wantProfile, tt.wantSpeedup, tt.wantPageSize, tt.wantSeed, tt.wantCacheReport)
			if got != want {
				t.Errorf("/server_info: got %s; want %s", got, want)
			}
			if code := stop(); code != 0 {
				t.Errorf("exit code after SIGTERM: %d, want 0", code)
			}
		})
	}
	if !knowsKVEvents {
		t.Logf("%s has no --kv-events-config flag: the all-on pod ran without it", bin)
	}
}

// podArgs returns the container's arguments as the kubelet passes them,
// with $(VAR) expanded from the container's environment, and the mounted
// ConfigMap's files written here, their paths in the arguments rewritten.
func podArgs(t *testing.T, m *manifests, c corev1.Container) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			env[e.Name] = "127.0.0.1"
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		default:
			t.Fatalf("env %s: a source the test does not provide: %+v", e.Name, e.ValueFrom)
		}
	}
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		dir := t.TempDir()
		for _, v := range m.deployment.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			if v.ConfigMap == nil || m.configMap == nil || v.ConfigMap.Name != m.configMap.Name {
				t.Fatalf("volume %s: not the chart's ConfigMap", v.Name)
			}
			for file, data := range m.configMap.Data {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(data), 0o444); err != nil {
					t.Fatal(err)
				}
			}
		}
		mounts[vm.MountPath] = dir
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		a = expandEnv(a, env)
		for mountPath, dir := range mounts {
			a = strings.ReplaceAll(a, "="+mountPath+"/", "="+dir+"/")
		}
		args[i] = a
	}
	return args
}

var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandEnv expands $(VAR) as the kubelet does for a variable the container
// defines, and leaves the reference as it is otherwise.
func expandEnv(s string, env map[string]string) string {
	return envReference.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

func dropFlag(args []string, flag string) []string {
	var kept []string
	for _, a := range args {
		if !strings.HasPrefix(a, flag+"=") {
			kept = append(kept, a)
		}
	}
	return kept
}

var servingOn = regexp.MustCompile(`on http://(127\.0\.0\.1:[0-9]+);`)

// startServer starts bin with args and waits until it is ready. stop sends
// SIGTERM and returns the exit code.
func startServer(t *testing.T, bin string, args []string) (base string, stop func() int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The log is read to its end, whatever the test does meanwhile: a
	// server blocked on a full pipe would stop answering.
	var (
		mu  sync.Mutex
		log strings.Builder
	)
	ready := make(chan string, 1)
	logEnded := make(chan struct{})
	go func() {
		defer close(logEnded)
		sc := bufio.NewScanner(stderr)
		var addr string
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			log.WriteString(line + "\n")
			mu.Unlock()
			if m := servingOn.FindStringSubmatch(line); m != nil {
				addr = m[1]
			}
			if addr != "" && strings.Contains(line, "The server is fired up and ready to roll!") {
				ready <- "http://" + addr
			}
		}
	}()
	wait := sync.OnceValue(func() int {
		<-logEnded // Wait closes the pipe: read it to its end first
		cmd.Wait()
		return cmd.ProcessState.ExitCode()
	})
	logText := func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
	stop = func() int {
		cmd.Process.Signal(syscall.SIGTERM)
		return wait()
	}
	t.Cleanup(func() {
		cmd.Process.Kill() // after stop, the process is gone and this does nothing
		wait()
	})
	select {
	case base = <-ready:
		return base, stop
	case <-logEnded:
		t.Fatalf("sglmock %q exited with %d:\n%s", args, wait(), logText())
	case <-time.After(60 * time.Second): // a bound, not a wait: the server is ready in well under a second
		t.Fatalf("sglmock %q is not ready after 60 s:\n%s", args, logText())
	}
	return "", nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
