package inject

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-rl/sluice/internal/version"
)

// defaultContainerKey names the container kubectl logs and exec use
// when none is given; without it, the first.
const defaultContainerKey = "kubectl.kubernetes.io/default-container"

// Operation is one JSON patch (RFC 6902) operation. The injector only adds.
type Operation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Result is what injection decided for one pod.
type Result struct {
	// Patch adds the sidecar, relative to the pod (or the pod template) it
	// was computed from; empty when nothing is to be done.
	Patch []Operation
	// Skipped says why Patch is empty: opted out, already injected.
	Skipped string
	// Warning is for the user: a pod left as it is that they may have
	// expected to be injected.
	Warning string
}

// Status is the value of StatusKey on an injected pod: what was added, so
// that a reader (or a later uninjector) knows.
type Status struct {
	Version   string   `json:"version"`
	Container string   `json:"container"`
	Native    bool     `json:"native"`
	Volumes   []string `json:"volumes,omitempty"`
}

// Pod decides on one pod, given the metadata and spec of a Pod or of a
// workload's pod template, and returns the patch that adds the sidecar:
// settings s with the pod's annotations applied (ForPod). A pod opted out
// (InjectKey "false" as a label or annotation), already injected
// (StatusKey), or with a container of the sidecar's name is skipped. An
// error is a setting that cannot be honoured, named.
func (s Settings) Pod(meta metav1.ObjectMeta, spec corev1.PodSpec) (Result, error) {
	if meta.Labels[InjectKey] == "false" || meta.Annotations[InjectKey] == "false" {
		return Result{Skipped: "opted out (" + InjectKey + ": \"false\")"}, nil
	}
	if _, ok := meta.Annotations[StatusKey]; ok {
		return Result{Skipped: "already injected (" + StatusKey + ")"}, nil
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if c.Name == ContainerName {
			return Result{Skipped: "has a container named " + ContainerName,
				Warning: "already has a container named " + ContainerName + "; left as it is"}, nil
		}
	}
	ps, err := s.ForPod(meta.Annotations)
	if err != nil {
		return Result{}, err
	}
	c, volumes := ps.Container()
	for _, v := range spec.Volumes {
		for _, mine := range volumes {
			if v.Name == mine.Name {
				return Result{}, fmt.Errorf("the pod already has a volume named %s", v.Name)
			}
		}
	}
	status := Status{Version: version.String(), Container: c.Name, Native: ps.Native}
	for _, v := range volumes {
		status.Volumes = append(status.Volumes, v.Name)
	}
	st, err := json.Marshal(status)
	if err != nil {
		return Result{}, err
	}
	annotations := map[string]string{StatusKey: string(st)}
	if _, ok := meta.Annotations["prometheus.io/scrape"]; ps.PrometheusScrape && !ok {
		port, _ := ps.adminPort()
		annotations["prometheus.io/scrape"] = "true"
		annotations["prometheus.io/port"] = strconv.Itoa(int(port))
		annotations["prometheus.io/path"] = "/metrics"
	}

	if _, ok := meta.Annotations[defaultContainerKey]; !ps.Native && !ok && len(spec.Containers) > 0 {
		// kubectl logs and exec keep going to the application.
		annotations[defaultContainerKey] = spec.Containers[0].Name
	}

	var p []Operation
	p = addToMap(p, "/metadata/annotations", meta.Annotations == nil, annotations)
	// The socket's volume goes into the containers the sidecar serves
	// before the sidecar goes in, while their indexes are the pod's.
	if m, ok := ps.SocketMount(); ok {
		if p, err = addMount(p, "/spec/containers", spec.Containers, m); err != nil {
			return Result{}, err
		}
		if ps.Native { // a plain sidecar starts after the init containers
			if p, err = addMount(p, "/spec/initContainers", spec.InitContainers, m); err != nil {
				return Result{}, err
			}
		}
	}
	if ps.Native {
		// First of the init containers, so that it serves the ones after
		// it as well as the application.
		if len(spec.InitContainers) == 0 {
			p = append(p, Operation{"add", "/spec/initContainers", []corev1.Container{c}})
		} else {
			p = append(p, Operation{"add", "/spec/initContainers/0", c})
		}
	} else if len(spec.Containers) == 0 { // only a skeleton has none
		p = append(p, Operation{"add", "/spec/containers", []corev1.Container{c}})
	} else {
		// First too: the kubelet starts a pod's containers in order, so
		// the sidecar gets a head start on the application (though no
		// guarantee, which only a native sidecar has).
		p = append(p, Operation{"add", "/spec/containers/0", c})
	}
	if len(volumes) > 0 {
		if len(spec.Volumes) == 0 {
			p = append(p, Operation{"add", "/spec/volumes", volumes})
		} else {
			for _, v := range volumes {
				p = append(p, Operation{"add", "/spec/volumes/-", v})
			}
		}
	}
	return Result{Patch: p}, nil
}

// addMount adds m to each of containers, at path in the pod.
func addMount(p []Operation, path string, containers []corev1.Container, m corev1.VolumeMount) ([]Operation, error) {
	for i, c := range containers {
		for _, have := range c.VolumeMounts {
			if have.MountPath == m.MountPath {
				return nil, fmt.Errorf("container %s already mounts %s at %s, where the sidecar's socket goes", c.Name, have.Name, m.MountPath)
			}
		}
		at := path + "/" + strconv.Itoa(i) + "/volumeMounts"
		if len(c.VolumeMounts) == 0 {
			p = append(p, Operation{"add", at, []corev1.VolumeMount{m}})
		} else {
			p = append(p, Operation{"add", at + "/-", m})
		}
	}
	return p, nil
}

// addToMap adds entries to the map at path: the whole map when it is
// absent, else one operation per key, so that keys already there stay.
func addToMap(p []Operation, path string, absent bool, entries map[string]string) []Operation {
	if absent {
		return append(p, Operation{"add", path, entries})
	}
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		p = append(p, Operation{"add", path + "/" + escape(k), entries[k]})
	}
	return p
}

// escape makes a key one JSON pointer token (RFC 6901).
func escape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// Prefix is p with every path under prefix: a pod template's patch made
// one of its workload.
func Prefix(p []Operation, prefix string) []Operation {
	out := make([]Operation, len(p))
	for i, op := range p {
		op.Path = prefix + op.Path
		out[i] = op
	}
	return out
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
