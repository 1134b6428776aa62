// Command kserve-offload-oracle runs KServe's own LLMInferenceService controller on one object
// and prints what it renders for spec.kvCacheOffloading. hack/oracles/kserve/build compiles it
// against github.com/kserve/kserve at a pinned version, in a throwaway module in the kvtier
// cache; nothing of KServe is copied into the kvtier repository.
//
// Input (stdin): one LLMInferenceService as JSON, serving.kserve.io/v1alpha2 or v1alpha1
// (v1alpha1 goes through KServe's own ConvertTo, which drops kvCacheOffloading).
//
// What runs, all of it KServe's code:
//   - v1alpha2.LLMInferenceServiceValidator.ValidateCreate (the admission webhook);
//   - (*llmisvc.LLMISVCReconciler).Reconcile against a controller-runtime fake client that
//     holds the object, KServe's shipped inferenceservice-config ConfigMap and its shipped
//     LLMInferenceServiceConfig presets (config/configmap and config/llmisvcconfig of the
//     module, embedded by the build script). The reconciler merges the presets
//     (ReplaceVariables renders the kvTransferConfig template function) and creates the
//     workloads (attachKVCacheSecondaryTiers adds the secondary tiers' volumes and mounts).
//     Reconcile may fail later, in the router part, which needs a real gateway: the
//     workloads are created before that and the error is reported, not fatal.
//     Written here, not KServe's: the fake client plays two parts of a cluster KServe has
//     run on before (clusterIPs, seededCertificate): Services get a ClusterIP, and the
//     workload's self-signed certificate exists, so KServe keeps it instead of spending most
//     of a run generating an RSA-4096 key. Neither shows in the output.
//   - the main container's own command, run by /bin/bash with the rendered env and a stub
//     `vllm` (this binary, by argv[0]) that reports -vllm-version and records its argv: the
//     words vLLM would get, after the template's quoting and the shell's eval.
//
// Output (stdout): JSON {"kserveVersion", "validation", "reconcileErrors", "workloads":
// [{"kind", "name", "role", "volumes", "initContainers", "containers": [{"name", "env",
// "volumeMounts", "resources", "vllmArgv", "kvTransferConfig"}]}]}, every container that has
// a command run; initContainers as the pod template holds them.
// Exit status 2: bad input or harness failure.
package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"embed"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fakeclientset "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/kmeta"
	"knative.dev/pkg/network"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	lwsapi "sigs.k8s.io/lws/api/leaderworkerset/v1"
	"sigs.k8s.io/yaml"

	"github.com/kserve/kserve/pkg/apis/serving/v1alpha1"
	"github.com/kserve/kserve/pkg/apis/serving/v1alpha2"
	"github.com/kserve/kserve/pkg/constants"
	"github.com/kserve/kserve/pkg/controller/v1alpha2/llmisvc"
	kservescheme "github.com/kserve/kserve/pkg/scheme"
)

// kserve-config/ is filled by the build script from the KServe module: inferenceservice.yaml
// (config/configmap) and the config-*.yaml presets (config/llmisvcconfig).
//
//go:embed kserve-config
var kserveConfig embed.FS

const (
	stubVersionEnv = "KVTIER_ORACLE_VLLM_VERSION"
	stubArgvEnv    = "KVTIER_ORACLE_VLLM_ARGV"
)

type containerOut struct {
	Name             string                      `json:"name"`
	Env              []corev1.EnvVar             `json:"env"`
	VolumeMounts     []corev1.VolumeMount        `json:"volumeMounts"`
	Resources        corev1.ResourceRequirements `json:"resources"`
	VLLMArgv         []string                    `json:"vllmArgv"`
	VLLMError        string                      `json:"vllmError,omitempty"`
	KVTransferConfig any                         `json:"kvTransferConfig"`
}

type workloadOut struct {
	Kind           string             `json:"kind"`
	Name           string             `json:"name"`
	Role           string             `json:"role"`
	Volumes        []corev1.Volume    `json:"volumes"`
	InitContainers []corev1.Container `json:"initContainers"`
	Containers     []containerOut     `json:"containers"`
}

type output struct {
	KServeVersion   string        `json:"kserveVersion"`
	Validation      validationOut `json:"validation"`
	ReconcileErrors []string      `json:"reconcileErrors"`
	Workloads       []workloadOut `json:"workloads"`
}

type validationOut struct {
	Warnings []string `json:"warnings"`
	Error    string   `json:"error,omitempty"`
}

// Set by the build script (-ldflags -X).
var kserveVersion = "unknown"

func main() {
	if filepath.Base(os.Args[0]) == "vllm" {
		os.Exit(stub(os.Args[1:]))
	}
	vllmVersion := flag.String("vllm-version", "0.24.0",
		"the version the stub vllm reports (the study's; KServe's template passes the offload flag only to 0.22.0+)")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *vllmVersion); err != nil {
		fmt.Fprintln(os.Stderr, "kserve-offload-oracle:", err)
		os.Exit(2)
	}
}

// stub plays `vllm`: `--version` prints the version asked for, anything else is recorded.
func stub(args []string) int {
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println(os.Getenv(stubVersionEnv))
		return 0
	}
	b, _ := json.Marshal(args)
	if err := os.WriteFile(os.Getenv(stubArgvEnv), b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func decodeStrict(data []byte, into any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

func readService(in io.Reader) (*v1alpha2.LLMInferenceService, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	var meta metav1.TypeMeta
	if err := json.Unmarshal(data, &meta); err != nil {
		return nil, fmt.Errorf("stdin is not a JSON object: %w", err)
	}
	if meta.Kind != "LLMInferenceService" {
		return nil, fmt.Errorf("kind %q: want LLMInferenceService", meta.Kind)
	}
	svc := &v1alpha2.LLMInferenceService{}
	switch meta.APIVersion {
	case v1alpha2.SchemeGroupVersion.String():
		if err := decodeStrict(data, svc); err != nil {
			return nil, fmt.Errorf("decoding into KServe's v1alpha2 types: %w", err)
		}
	case v1alpha1.SchemeGroupVersion.String():
		old := &v1alpha1.LLMInferenceService{}
		if err := decodeStrict(data, old); err != nil {
			return nil, fmt.Errorf("decoding into KServe's v1alpha1 types: %w", err)
		}
		if err := old.ConvertTo(svc); err != nil {
			return nil, fmt.Errorf("KServe's v1alpha1 ConvertTo: %w", err)
		}
	default:
		return nil, fmt.Errorf("apiVersion %q: want serving.kserve.io/v1alpha2 or v1alpha1", meta.APIVersion)
	}
	svc.APIVersion = v1alpha2.SchemeGroupVersion.String()
	svc.Kind = "LLMInferenceService"
	if svc.Namespace == "" {
		svc.Namespace = "default"
	}
	return svc, nil
}

// shipped returns KServe's inferenceservice-config (first) and its LLMInferenceServiceConfig presets,
// as KServe's kustomize install puts them in its namespace.
func shipped() ([]client.Object, error) {
	var objs []client.Object
	data, err := kserveConfig.ReadFile("kserve-config/inferenceservice.yaml")
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(data, cm); err != nil {
		return nil, fmt.Errorf("inferenceservice.yaml: %w", err)
	}
	cm.Namespace = constants.KServeNamespace
	objs = append(objs, cm)
	entries, err := kserveConfig.ReadDir("kserve-config")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "config-") {
			continue
		}
		data, err := kserveConfig.ReadFile("kserve-config/" + e.Name())
		if err != nil {
			return nil, err
		}
		cfg := &v1alpha2.LLMInferenceServiceConfig{}
		if err := decodeStrict(data, cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		cfg.Namespace = constants.KServeNamespace
		objs = append(objs, cfg)
	}
	return objs, nil
}

// clusterIP is the address the API server gives the Services KServe creates here. KServe
// puts every Service's ClusterIP among the certificate's wanted IPs, so a Service left without
// one would have it make a new certificate on every pass.
const clusterIP = "10.96.0.10"

// clusterIPs plays the API server's part the fake client lacks: a Service created without a
// ClusterIP gets one, and an update that leaves it unset keeps the one allocated.
var clusterIPs = interceptor.Funcs{
	Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if s, ok := obj.(*corev1.Service); ok && s.Spec.ClusterIP == "" {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = clusterIP, []string{clusterIP}
		}
		return c.Create(ctx, obj, opts...)
	},
	Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if s, ok := obj.(*corev1.Service); ok && s.Spec.ClusterIP == "" {
			old := &corev1.Service{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(s), old); err == nil {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
			}
		}
		return c.Update(ctx, obj, opts...)
	},
}

// seededCertificate is the workload's self-signed TLS Secret as a cluster holds it once
// KServe's reconciler has run there: KServe keeps a certificate that is unexpired and names
// every DNS name it wants (ShouldRecreateCertificate), instead of generating an RSA-4096 key,
// which took about 80 % of this oracle's CPU. Nothing the oracle reports depends on the
// certificate's contents; should the names here ever miss one of KServe's, KServe makes its
// own certificate, as on a first reconcile. The names: collectDNSNames's for the workload
// Service, and for the endpoint picker both the service's own pool's and the scheduler
// preset's default (config-llm-scheduler's ChildName of -epp-service).
func seededCertificate(svc *v1alpha2.LLMInferenceService) (*corev1.Secret, error) {
	services := []string{
		kmeta.ChildName(svc.Name, "-kserve-workload-svc"),
		kmeta.ChildName(svc.Name, "-epp-service"),
	}
	if r := svc.Spec.Router; r != nil && r.Scheduler != nil && r.Scheduler.Pool != nil &&
		r.Scheduler.Pool.Spec != nil && r.Scheduler.Pool.Spec.EndpointPickerRef.Name != "" {
		services = append(services, string(r.Scheduler.Pool.Spec.EndpointPickerRef.Name))
	}
	names := []string{"localhost"}
	for _, s := range services {
		names = append(names, network.GetServiceHostname(s, svc.Namespace), fmt.Sprintf("%s.%s.svc", s, svc.Namespace))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	template := x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{Organization: []string{"Kserve Self Signed"}},
		NotBefore:             now,
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(clusterIP)},
	}
	der, err := x509.CreateCertificate(rand.Reader, &template, &template, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace,
			Name:      kmeta.ChildName(svc.Name, "-kserve-self-signed-certs"),
			// KServe updates only a Secret the service controls.
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(svc, v1alpha2.SchemeGroupVersion.WithKind("LLMInferenceService")),
			},
		},
		Data: map[string][]byte{
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
			"tls.crt": crt,
			"ca.crt":  crt,
		},
	}, nil
}

func run(in io.Reader, out io.Writer, vllmVersion string) error {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	ctx := log.IntoContext(context.Background(), ctrl.Log)

	svc, err := readService(in)
	if err != nil {
		return err
	}
	result := output{KServeVersion: kserveVersion, ReconcileErrors: []string{}, Workloads: []workloadOut{}}

	warnings, verr := (&v1alpha2.LLMInferenceServiceValidator{}).ValidateCreate(ctx, svc.DeepCopy())
	result.Validation.Warnings = append([]string{}, warnings...)
	if verr != nil {
		result.Validation.Error = verr.Error()
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := kservescheme.AddLLMISVCAPIs(scheme); err != nil {
		return err
	}
	objs, err := shipped()
	if err != nil {
		return err
	}
	objs = append(objs,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: constants.KServeNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: svc.Namespace}},
		svc,
	)
	cert, err := seededCertificate(svc)
	if err != nil {
		return err
	}
	objs = append(objs, cert)
	c := fake.NewClientBuilder().
		WithScheme(scheme).
		// Every registered kind, cluster-scoped or not as Kubernetes has it (KServe asks
		// the mapper before it writes the TLS secret, RBAC and workloads).
		WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(scheme)).
		WithObjects(objs...).
		WithStatusSubresource(&v1alpha2.LLMInferenceService{}).
		WithInterceptorFuncs(clusterIPs).
		Build()
	r := &llmisvc.LLMISVCReconciler{
		Client:        c,
		EventRecorder: record.NewFakeRecorder(1000),
		// KServe reads inferenceservice-config through the typed clientset too (the CA
		// bundle reconciler, the config loader's fallback).
		Clientset: fakeclientset.NewClientset(objs[0].(*corev1.ConfigMap).DeepCopy()),
		// As cmd/llmisvc wires it: the merged spec goes through the v1alpha2 webhook.
		Validator: func(ctx context.Context, s *v1alpha2.LLMInferenceService) error {
			_, err := (&v1alpha2.LLMInferenceServiceValidator{}).ValidateCreate(ctx, s)
			return err
		},
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}}
	// The first pass adds the finalizer and reconciles; a second one sees a stable object.
	for pass := range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			result.ReconcileErrors = append(result.ReconcileErrors, fmt.Sprintf("pass %d: %v", pass+1, err))
		}
	}

	workloads, err := collect(ctx, c, svc.Namespace)
	if err != nil {
		return err
	}
	for _, w := range workloads {
		for i := range w.Containers {
			cout := &w.Containers[i]
			spec := w.specs[i]
			if len(spec.Command) == 0 {
				continue
			}
			argv, err := runCommand(spec, vllmVersion)
			if err != nil {
				cout.VLLMError = err.Error()
				continue
			}
			cout.VLLMArgv = argv
			cout.KVTransferConfig, err = kvTransferConfig(argv)
			if err != nil {
				cout.VLLMError = err.Error()
			}
		}
		result.Workloads = append(result.Workloads, w.workloadOut)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(result)
}

type collected struct {
	workloadOut
	specs []corev1.Container
}

func podOut(kind, name, role string, pod *corev1.PodSpec) collected {
	w := collected{workloadOut: workloadOut{
		Kind: kind, Name: name, Role: role, Volumes: pod.Volumes, InitContainers: pod.InitContainers,
	}}
	for _, ctr := range pod.Containers {
		w.Containers = append(w.Containers, containerOut{
			Name:         ctr.Name,
			Env:          ctr.Env,
			VolumeMounts: ctr.VolumeMounts,
			Resources:    ctr.Resources,
		})
		w.specs = append(w.specs, ctr)
	}
	return w
}

func collect(ctx context.Context, c client.Client, namespace string) ([]collected, error) {
	var out []collected
	deployments := &appsv1.DeploymentList{}
	if err := c.List(ctx, deployments, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for i := range deployments.Items {
		d := &deployments.Items[i]
		out = append(out, podOut("Deployment", d.Name, "pod", &d.Spec.Template.Spec))
	}
	sets := &lwsapi.LeaderWorkerSetList{}
	if err := c.List(ctx, sets, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for i := range sets.Items {
		s := &sets.Items[i]
		if lt := s.Spec.LeaderWorkerTemplate.LeaderTemplate; lt != nil {
			out = append(out, podOut("LeaderWorkerSet", s.Name, "leader", &lt.Spec))
		}
		out = append(out, podOut("LeaderWorkerSet", s.Name, "worker",
			&s.Spec.LeaderWorkerTemplate.WorkerTemplate.Spec))
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Kind+"/"+out[i].Name+"/"+out[i].Role < out[j].Kind+"/"+out[j].Name+"/"+out[j].Role
	})
	return out, nil
}

// runCommand runs the container's command and args as the kubelet would start them, with its
// literal env values, a stub vllm first on PATH, and returns the argv the stub got.
func runCommand(ctr corev1.Container, vllmVersion string) ([]string, error) {
	dir, err := os.MkdirTemp("", "kserve-oracle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if err := os.Symlink(self, filepath.Join(dir, "vllm")); err != nil {
		return nil, err
	}
	argvFile := filepath.Join(dir, "argv.json")
	words := append(append([]string{}, ctr.Command...), ctr.Args...)
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + dir + ":/usr/local/bin:/usr/bin:/bin",
		stubVersionEnv + "=" + vllmVersion,
		stubArgvEnv + "=" + argvFile,
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
	}
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	data, err := os.ReadFile(argvFile)
	if err != nil {
		return nil, fmt.Errorf("the command did not run vllm: %s", stderr.String())
	}
	var argv []string
	return argv, json.Unmarshal(data, &argv)
}

// kvTransferConfig is the parsed value of the last --kv-transfer-config in argv (vLLM's
// argparse keeps the last one), nil when there is none.
func kvTransferConfig(argv []string) (any, error) {
	var value *string
	for i, a := range argv {
		for _, flagName := range []string{"--kv-transfer-config", "--kv_transfer_config"} {
			if a == flagName && i+1 < len(argv) {
				value = &argv[i+1]
			} else if v, ok := strings.CutPrefix(a, flagName+"="); ok {
				value = &v
			}
		}
	}
	if value == nil {
		return nil, nil
	}
	var parsed any
	if err := json.Unmarshal([]byte(*value), &parsed); err != nil {
		return nil, errors.Join(fmt.Errorf("--kv-transfer-config %q is not JSON", *value), err)
	}
	return parsed, nil
}
