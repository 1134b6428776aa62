// Command kserve-runtime-oracle runs KServe's own InferenceService controller on one
// InferenceService and the ServingRuntimes and ClusterServingRuntimes beside it, and prints
// the Deployments it writes and the pods KServe's pod webhook makes of them.
// hack/oracles/kserve/build compiles it against github.com/kserve/kserve at a pinned version
// (the same throwaway module as kserve-offload-oracle); nothing of KServe is copied into the
// kvtier repository.
//
// Input (stdin): JSON {"inferenceService": {...}, "servingRuntimes": [...],
// "clusterServingRuntimes": [...]}, the objects as a user writes them (serving.kserve.io
// v1beta1 and v1alpha1). A ServingRuntime without a namespace is put in the service's; a
// service without metadata.generation gets 1, as the API server gives a new object.
//
// What runs, all of it KServe's code, in the order the API server and the manager run it:
//   - each runtime through KServe's ServingRuntime / ClusterServingRuntime admission webhook
//     (servingruntime.ServingRuntimeValidator.Handle, against the runtimes already admitted);
//   - (*v1beta1.InferenceService).DefaultInferenceService with the config read from KServe's
//     shipped inferenceservice-config (what the defaulting webhook does; the webhook's own
//     Default also lists LocalModelCaches through a live client, and none is given here), then
//     v1beta1.InferenceServiceValidator.ValidateCreate (the validating webhook);
//   - (*v1beta1.ModelSpec).GetSupportingRuntimes, reported as KServe orders the candidates
//     (namespace runtimes before cluster ones, each by priority);
//   - (*inferenceservice.InferenceServiceReconciler).Reconcile, three passes, against a
//     controller-runtime fake client holding the objects and KServe's shipped
//     inferenceservice-config (config/configmap of the module, embedded by the build script)
//     with deploy.defaultDeploymentMode set to Standard (RawDeployment, as OpenShift AI runs
//     it; an annotation serving.kserve.io/deploymentMode on the service still wins). The
//     reconciler selects the runtime (or the one spec.predictor.model.runtime names), merges
//     it with the predictor (MergeServingRuntimeAndInferenceServiceSpecs: MergeRuntimeContainers
//     with the runtime's args then the service's, MergePodSpec), replaces {{.Name}}-style
//     placeholders, UpdateImageTag, adds INFERENCE_SERVICE_NAME and, for a workerSpec, the
//     multi-node env and worker pod spec; and writes the Deployments (the head, and the
//     worker for a workerSpec). Every Deployment it writes is reported in the last state it
//     wrote: v0.20.0 deletes the worker Deployment (and the head and worker Services) in the
//     same reconcile that created it (the canary cleanup does not count them as its own;
//     kserve/kserve#6113, fixed after v0.20.0), which "deletedByKServe" reports;
//   - pod.Mutator.Handle (KServe's pod webhook) on a pod made from each Deployment's
//     template, as the API server calls it when the ReplicaSet controller creates the pod:
//     the storage initializer (or the PVC mount for pvc://), the agent, the batcher;
//   - each container's own command and args, run by /bin/bash (or the command itself) with
//     its literal env, the fieldRef env the pod would get (metadata.name, metadata.namespace,
//     status.podIP as 10.0.0.1) and stubs first on PATH: `vllm`, `python`/`python3` (only
//     `-m vllm.entrypoints.openai.api_server` is played) record their argv; `ray` plays a
//     Ray cluster of PIPELINE_PARALLEL_SIZE nodes that is already up (start, status,
//     health-check succeed). A container whose command or args hold a $(VAR) reference is
//     not run (the kubelet's expansion of those is not in KServe's module graph): its
//     vllmError says so.
//
// Not run: the Kubernetes API server (so no server-side defaults of Deployments), the
// Knative path, leader election, events.
//
// Output (stdout): JSON {"kserveVersion", "runtimeValidation": [{"kind", "name", "allowed",
// "message"}], "validation": {"warnings", "error"}, "supportingRuntimes": [{"name", "kind"}],
// "supportingRuntimesError", "runtime": {"name", "kind"} or null, "reconcileErrors",
// "deployments": [{"name", "role" (head|worker), "labels", "annotations", "podTemplate",
// "deletedByKServe",
// "pod" (the pod spec after KServe's pod webhook), "podError", "containers": [{"name",
// "vllmArgv", "vllmError"}]}]}. vllmArgv starts with the program's name: ["vllm", "serve",
// ...] or ["python", "-m", "vllm.entrypoints.openai.api_server", ...].
// Exit status 2: bad input or harness failure.
package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fakeclientset "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/kserve/kserve/pkg/apis/serving/v1alpha1"
	"github.com/kserve/kserve/pkg/apis/serving/v1beta1"
	"github.com/kserve/kserve/pkg/constants"
	isvccontroller "github.com/kserve/kserve/pkg/controller/v1beta1/inferenceservice"
	kservescheme "github.com/kserve/kserve/pkg/scheme"
	"github.com/kserve/kserve/pkg/webhook/admission/pod"
	"github.com/kserve/kserve/pkg/webhook/admission/servingruntime"
)

// kserve-config/ is filled by the build script: inferenceservice.yaml (config/configmap).
//
//go:embed kserve-config
var kserveConfig embed.FS

const (
	stubArgvEnv = "KVTIER_ORACLE_ARGV"
	podIP       = "10.0.0.1"
)

// Set by the build script (-ldflags -X).
var kserveVersion = "unknown"

type input struct {
	InferenceService       json.RawMessage   `json:"inferenceService"`
	ServingRuntimes        []json.RawMessage `json:"servingRuntimes"`
	ClusterServingRuntimes []json.RawMessage `json:"clusterServingRuntimes"`
}

type runtimeRef struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

type runtimeValidation struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
	Message string `json:"message,omitempty"`
}

type validationOut struct {
	Warnings []string `json:"warnings"`
	Error    string   `json:"error,omitempty"`
}

type containerOut struct {
	Name      string   `json:"name"`
	VLLMArgv  []string `json:"vllmArgv"`
	VLLMError string   `json:"vllmError,omitempty"`
}

type deploymentOut struct {
	Name        string                 `json:"name"`
	Role        string                 `json:"role"`
	Labels      map[string]string      `json:"labels"`
	Annotations map[string]string      `json:"annotations"`
	PodTemplate corev1.PodTemplateSpec `json:"podTemplate"`
	// DeletedByKServe: the reconciler deleted it after writing it (and it is not there at the end).
	DeletedByKServe bool            `json:"deletedByKServe"`
	Pod             *corev1.PodSpec `json:"pod"`
	PodError        string          `json:"podError,omitempty"`
	Containers      []containerOut  `json:"containers"`
}

type output struct {
	KServeVersion           string              `json:"kserveVersion"`
	RuntimeValidation       []runtimeValidation `json:"runtimeValidation"`
	Validation              validationOut       `json:"validation"`
	SupportingRuntimes      []runtimeRef        `json:"supportingRuntimes"`
	SupportingRuntimesError string              `json:"supportingRuntimesError,omitempty"`
	Runtime                 *runtimeRef         `json:"runtime"`
	ReconcileErrors         []string            `json:"reconcileErrors"`
	Deployments             []deploymentOut     `json:"deployments"`
}

func main() {
	if name := filepath.Base(os.Args[0]); name != "kserve-runtime-oracle" && stubNames[name] {
		os.Exit(stub(name, os.Args[1:]))
	}
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kserve-runtime-oracle:", err)
		os.Exit(2)
	}
}

var stubNames = map[string]bool{"vllm": true, "python": true, "python3": true, "ray": true}

// stub plays the programs a runtime's command starts (this binary, by argv[0]).
func stub(name string, args []string) int {
	switch name {
	case "ray":
		// A Ray cluster that is already up: `ray status` lists PIPELINE_PARALLEL_SIZE nodes.
		if len(args) > 0 && args[0] == "status" {
			n, _ := strconv.Atoi(os.Getenv(constants.PipelineParallelSizeEnvName))
			for i := range n {
				fmt.Printf(" 1 node_%d\n", i)
			}
		}
		return 0
	case "python", "python3":
		if len(args) < 2 || args[0] != "-m" || args[1] != "vllm.entrypoints.openai.api_server" {
			fmt.Fprintf(os.Stderr, "stub %s: only -m vllm.entrypoints.openai.api_server is played, got %q\n", name, args)
			return 1
		}
	}
	b, _ := json.Marshal(append([]string{name}, args...))
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

func checkKind(data []byte, apiVersion, kind string) error {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		return err
	}
	if tm.APIVersion != apiVersion || tm.Kind != kind {
		return fmt.Errorf("%s %s: want %s %s", tm.APIVersion, tm.Kind, apiVersion, kind)
	}
	return nil
}

func readInput(in io.Reader) (*v1beta1.InferenceService, []*v1alpha1.ServingRuntime, []*v1alpha1.ClusterServingRuntime, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, nil, nil, err
	}
	var raw input
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, nil, fmt.Errorf("stdin: %w", err)
	}
	if raw.InferenceService == nil {
		return nil, nil, nil, errors.New("stdin: no inferenceService")
	}
	isvc := &v1beta1.InferenceService{}
	if err := checkKind(raw.InferenceService, v1beta1.SchemeGroupVersion.String(), "InferenceService"); err != nil {
		return nil, nil, nil, err
	}
	if err := decodeStrict(raw.InferenceService, isvc); err != nil {
		return nil, nil, nil, fmt.Errorf("inferenceService, into KServe's v1beta1 types: %w", err)
	}
	if isvc.Namespace == "" {
		isvc.Namespace = "default"
	}
	// As the API server stores a new object (KServe names the multi-node Services by it).
	if isvc.Generation == 0 {
		isvc.Generation = 1
	}
	var srs []*v1alpha1.ServingRuntime
	for i, r := range raw.ServingRuntimes {
		sr := &v1alpha1.ServingRuntime{}
		if err := checkKind(r, v1alpha1.SchemeGroupVersion.String(), "ServingRuntime"); err != nil {
			return nil, nil, nil, fmt.Errorf("servingRuntimes[%d]: %w", i, err)
		}
		if err := decodeStrict(r, sr); err != nil {
			return nil, nil, nil, fmt.Errorf("servingRuntimes[%d], into KServe's v1alpha1 types: %w", i, err)
		}
		if sr.Namespace == "" {
			sr.Namespace = isvc.Namespace
		}
		srs = append(srs, sr)
	}
	var csrs []*v1alpha1.ClusterServingRuntime
	for i, r := range raw.ClusterServingRuntimes {
		csr := &v1alpha1.ClusterServingRuntime{}
		if err := checkKind(r, v1alpha1.SchemeGroupVersion.String(), "ClusterServingRuntime"); err != nil {
			return nil, nil, nil, fmt.Errorf("clusterServingRuntimes[%d]: %w", i, err)
		}
		if err := decodeStrict(r, csr); err != nil {
			return nil, nil, nil, fmt.Errorf("clusterServingRuntimes[%d], into KServe's v1alpha1 types: %w", i, err)
		}
		csr.Namespace = ""
		csrs = append(csrs, csr)
	}
	return isvc, srs, csrs, nil
}

// configMap is KServe's shipped inferenceservice-config with the default deployment mode
// Standard (the one change; the deploy entry is KServe's own JSON otherwise).
func configMap() (*corev1.ConfigMap, error) {
	data, err := kserveConfig.ReadFile("kserve-config/inferenceservice.yaml")
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(data, cm); err != nil {
		return nil, fmt.Errorf("inferenceservice.yaml: %w", err)
	}
	cm.Namespace = constants.KServeNamespace
	deploy := map[string]any{}
	if err := json.Unmarshal([]byte(cm.Data["deploy"]), &deploy); err != nil {
		return nil, fmt.Errorf("inferenceservice.yaml deploy: %w", err)
	}
	deploy["defaultDeploymentMode"] = string(constants.Standard)
	b, err := json.Marshal(deploy)
	if err != nil {
		return nil, err
	}
	cm.Data["deploy"] = string(b)
	return cm, nil
}

// restMapper: KServe's kinds with the scopes of their CRDs (config/crd/full), Kubernetes'
// and the other groups' as controller-runtime's test mapper has them.
func restMapper() (meta.RESTMapper, error) {
	others := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, kservescheme.AddCoreKubernetesAPIs, kservescheme.AddGatewayAPIs,
		kservescheme.AddLeaderWorkerSetAPIs, kservescheme.AddKnativeAPIs, kservescheme.AddIstioAPIs,
		kservescheme.AddKedaAPIs, kservescheme.AddWVAAPIs, kservescheme.AddOpenTelemetryAPIs,
	} {
		if err := add(others); err != nil {
			return nil, err
		}
	}
	ours := runtime.NewScheme()
	if err := kservescheme.AddKServeAPIs(ours); err != nil {
		return nil, err
	}
	clusterScoped := map[string]bool{
		"ClusterServingRuntime": true, "ClusterStorageContainer": true, "LocalModelCache": true,
		"LocalModelNode": true, "LocalModelNodeGroup": true,
	}
	kserve := meta.NewDefaultRESTMapper(ours.PrioritizedVersionsAllGroups())
	for gvk := range ours.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") || gvk.Group != v1beta1.SchemeGroupVersion.Group {
			continue
		}
		scope := meta.RESTScopeNamespace
		if clusterScoped[gvk.Kind] {
			scope = meta.RESTScopeRoot
		}
		kserve.Add(gvk, scope)
	}
	return meta.MultiRESTMapper{kserve, testrestmapper.TestOnlyStaticRESTMapper(others)}, nil
}

func admissionRequest(obj runtime.Object, kind, name, namespace string) (admission.Request, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return admission.Request{}, err
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Group: "serving.kserve.io", Version: "v1alpha1", Kind: kind},
		Name:      name,
		Namespace: namespace,
		Object:    runtime.RawExtension{Raw: raw},
	}}, nil
}

func run(in io.Reader, out io.Writer) error {
	// KVTIER_ORACLE_LOG=1: KServe's own log on stderr (to see why it wrote what it wrote).
	logTo := io.Discard
	if os.Getenv("KVTIER_ORACLE_LOG") != "" {
		logTo = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logTo)))
	ctx := log.IntoContext(context.Background(), ctrl.Log)

	isvc, srs, csrs, err := readInput(in)
	if err != nil {
		return err
	}
	result := output{
		KServeVersion: kserveVersion, RuntimeValidation: []runtimeValidation{},
		SupportingRuntimes: []runtimeRef{}, ReconcileErrors: []string{}, Deployments: []deploymentOut{},
	}
	scheme := runtime.NewScheme()
	if err := kservescheme.AddAll(scheme); err != nil {
		return err
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	mapper, err := restMapper()
	if err != nil {
		return err
	}
	cm, err := configMap()
	if err != nil {
		return err
	}
	newClient := func(objs ...client.Object) client.Client {
		return fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(objs...).
			WithStatusSubresource(&v1beta1.InferenceService{}).Build()
	}
	decoder := admission.NewDecoder(scheme)

	// The runtimes, admitted one after the other by KServe's webhooks.
	var admitted []client.Object
	for _, sr := range srs {
		sr.APIVersion, sr.Kind = v1alpha1.SchemeGroupVersion.String(), "ServingRuntime"
		req, err := admissionRequest(sr, sr.Kind, sr.Name, sr.Namespace)
		if err != nil {
			return err
		}
		resp := (&servingruntime.ServingRuntimeValidator{Client: newClient(admitted...), Decoder: decoder}).Handle(ctx, req)
		result.RuntimeValidation = append(result.RuntimeValidation, runtimeValidation{
			Kind: sr.Kind, Name: sr.Name, Allowed: resp.Allowed, Message: resp.Result.Message,
		})
		if resp.Allowed {
			admitted = append(admitted, sr)
		}
	}
	for _, csr := range csrs {
		csr.APIVersion, csr.Kind = v1alpha1.SchemeGroupVersion.String(), "ClusterServingRuntime"
		req, err := admissionRequest(csr, csr.Kind, csr.Name, "")
		if err != nil {
			return err
		}
		resp := (&servingruntime.ClusterServingRuntimeValidator{Client: newClient(admitted...), Decoder: decoder}).Handle(ctx, req)
		result.RuntimeValidation = append(result.RuntimeValidation, runtimeValidation{
			Kind: csr.Kind, Name: csr.Name, Allowed: resp.Allowed, Message: resp.Result.Message,
		})
		if resp.Allowed {
			admitted = append(admitted, csr)
		}
	}

	// The service through KServe's defaulting and validating webhooks.
	isvcConfig, err := v1beta1.NewInferenceServicesConfig(cm)
	if err != nil {
		return err
	}
	deployConfig, err := v1beta1.NewDeployConfig(cm)
	if err != nil {
		return err
	}
	securityConfig, err := v1beta1.NewSecurityConfig(cm)
	if err != nil {
		return err
	}
	isvc.DefaultInferenceService(isvcConfig, deployConfig, securityConfig, nil, nil)
	warnings, verr := (&v1beta1.InferenceServiceValidator{}).ValidateCreate(ctx, isvc.DeepCopy())
	result.Validation.Warnings = append([]string{}, warnings...)
	if verr != nil {
		result.Validation.Error = verr.Error()
	}

	objs := append([]client.Object{
		cm,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: constants.KServeNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: isvc.Namespace}},
		isvc,
	}, admitted...)
	// Every Deployment KServe writes is recorded as written: KServe v0.20.0 deletes the
	// multi-node worker Deployment in the reconcile that created it (kserve/kserve#6113), and
	// the worker's pod template is still what it built.
	rec := &recorder{written: map[string]*appsv1.Deployment{}, deleted: map[string]bool{}}
	c := interceptor.NewClient(
		fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(objs...).
			WithStatusSubresource(&v1beta1.InferenceService{}).Build(),
		rec.funcs(),
	)

	// The candidates, as KServe orders them (what the reconciler takes the first of).
	if isvc.Spec.Predictor.Model != nil {
		multiNode := isvc.Spec.Predictor.WorkerSpec != nil
		found, err := isvc.Spec.Predictor.Model.GetSupportingRuntimes(ctx, c, isvc.Namespace, false, multiNode)
		if err != nil {
			result.SupportingRuntimesError = err.Error()
		}
		for _, r := range found {
			kind := "ClusterServingRuntime"
			for _, sr := range srs {
				if sr.Name == r.Name && sr.Namespace == isvc.Namespace && reflect.DeepEqual(sr.Spec, r.Spec) {
					kind = "ServingRuntime"
				}
			}
			result.SupportingRuntimes = append(result.SupportingRuntimes, runtimeRef{Name: r.Name, Kind: kind})
		}
	}

	clientset := fakeclientset.NewClientset(cm.DeepCopy())
	r := &isvccontroller.InferenceServiceReconciler{
		Client:    c,
		Clientset: clientset,
		Log:       ctrl.Log.WithName("InferenceService"),
		Scheme:    scheme,
		Recorder:  record.NewFakeRecorder(1000),
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: isvc.Namespace, Name: isvc.Name}}
	if verr == nil {
		for pass := range 3 {
			if _, err := r.Reconcile(ctx, req); err != nil {
				result.ReconcileErrors = append(result.ReconcileErrors, fmt.Sprintf("pass %d: %v", pass+1, err))
			}
		}
	}
	stored := &v1beta1.InferenceService{}
	if err := c.Get(ctx, req.NamespacedName, stored); err != nil {
		return err
	}
	if n := stored.Status.ServingRuntimeName; n != "" {
		result.Runtime = &runtimeRef{Name: n, Kind: "ServingRuntime"}
	} else if n := stored.Status.ClusterServingRuntimeName; n != "" {
		result.Runtime = &runtimeRef{Name: n, Kind: "ClusterServingRuntime"}
	}

	names := make([]string, 0, len(rec.written))
	for name := range rec.written {
		names = append(names, name)
	}
	sort.Strings(names)
	mutator := &pod.Mutator{Client: c, Clientset: clientset, Decoder: decoder}
	for _, name := range names {
		d := rec.written[name]
		role := "head"
		if d.Name == constants.PredictorWorkerServiceName(isvc.Name) {
			role = "worker"
		}
		dout := deploymentOut{
			Name: d.Name, Role: role, Labels: d.Labels, Annotations: d.Annotations,
			PodTemplate: d.Spec.Template, DeletedByKServe: rec.deleted[name], Containers: []containerOut{},
		}
		spec, err := mutatePod(ctx, mutator, d)
		if err != nil {
			dout.PodError = err.Error()
			spec = d.Spec.Template.Spec.DeepCopy()
		} else {
			dout.Pod = spec
		}
		for _, ctr := range spec.Containers {
			cout := containerOut{Name: ctr.Name}
			cout.VLLMArgv, err = runCommand(ctr, d.Name+"-0", isvc.Namespace)
			if err != nil {
				cout.VLLMError = err.Error()
			}
			dout.Containers = append(dout.Containers, cout)
		}
		result.Deployments = append(result.Deployments, dout)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(result)
}

// recorder keeps the last state of every Deployment the reconciler created, updated or
// patched, and which of them it deleted since (and did not write again).
type recorder struct {
	written map[string]*appsv1.Deployment
	deleted map[string]bool
}

func (r *recorder) keep(ctx context.Context, c client.WithWatch, obj client.Object) {
	if _, ok := obj.(*appsv1.Deployment); !ok {
		return
	}
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), d); err == nil {
		r.written[d.Name] = d
		delete(r.deleted, d.Name)
	}
}

func (r *recorder) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			r.keep(ctx, c, obj)
			return nil
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.Update(ctx, obj, opts...); err != nil {
				return err
			}
			r.keep(ctx, c, obj)
			return nil
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			r.keep(ctx, c, obj)
			return nil
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := c.Delete(ctx, obj, opts...); err != nil {
				return err
			}
			if _, ok := obj.(*appsv1.Deployment); ok {
				r.deleted[obj.GetName()] = true
			}
			return nil
		},
	}
}

// mutatePod: KServe's pod webhook on the pod the ReplicaSet controller would create from the
// Deployment's template; the pod spec after its patch.
func mutatePod(ctx context.Context, m *pod.Mutator, d *appsv1.Deployment) (*corev1.PodSpec, error) {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: *d.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	p.Name, p.Namespace = d.Name+"-0", d.Namespace
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	resp := m.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Namespace: d.Namespace,
		Object:    runtime.RawExtension{Raw: raw},
	}})
	if !resp.Allowed {
		return nil, fmt.Errorf("KServe's pod webhook refused the pod: %s", resp.Result.Message)
	}
	if len(resp.Patches) > 0 {
		ops, err := json.Marshal(resp.Patches)
		if err != nil {
			return nil, err
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			return nil, err
		}
		if raw, err = patch.Apply(raw); err != nil {
			return nil, err
		}
	}
	mutated := &corev1.Pod{}
	if err := json.Unmarshal(raw, mutated); err != nil {
		return nil, err
	}
	return &mutated.Spec, nil
}

// varRef: a $(NAME) reference the kubelet replaces by the env var's value when NAME is
// defined (the harness does not play that expansion).
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// runCommand runs the container's command and args as the kubelet would start them and
// returns the argv a stubbed vLLM got.
func runCommand(ctr corev1.Container, podName, namespace string) ([]string, error) {
	words := append(append([]string{}, ctr.Command...), ctr.Args...)
	if len(ctr.Command) == 0 {
		return nil, errors.New("no command (the image's entrypoint would run)")
	}
	defined := map[string]bool{}
	for _, e := range ctr.Env {
		defined[e.Name] = true
	}
	for _, w := range words {
		for _, ref := range varRef.FindAllStringSubmatch(w, -1) {
			if defined[ref[1]] {
				return nil, fmt.Errorf("not run: %q holds $(%s), which the kubelet expands", w, ref[1])
			}
		}
	}
	dir, err := os.MkdirTemp("", "kserve-runtime-oracle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for name := range stubNames {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	argvFile := filepath.Join(dir, "argv.json")
	path := []string{dir, "/usr/local/bin", "/usr/bin", "/bin"}
	program := words[0]
	if !strings.Contains(program, "/") {
		// Looked up on the container's PATH (the stubs first), not the harness's.
		program = ""
		for _, d := range path {
			if fi, err := os.Stat(filepath.Join(d, words[0])); err == nil && !fi.IsDir() {
				program = filepath.Join(d, words[0])
				break
			}
		}
		if program == "" {
			return nil, fmt.Errorf("%s: not found on %s", words[0], strings.Join(path[1:], ":"))
		}
	}
	cmd := exec.Command(program, words[1:]...)
	cmd.Args[0] = words[0]
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + strings.Join(path, ":"), stubArgvEnv + "=" + argvFile}
	fields := map[string]string{"metadata.name": podName, "metadata.namespace": namespace, "status.podIP": podIP}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && fields[e.ValueFrom.FieldRef.FieldPath] != "":
			cmd.Env = append(cmd.Env, e.Name+"="+fields[e.ValueFrom.FieldRef.FieldPath])
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
