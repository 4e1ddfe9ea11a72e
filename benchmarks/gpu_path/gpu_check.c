/* The GPU check's container program (benchmarks/gpu_path.py): loads the image's CUDA runtime and NCCL as any
 * program in the image would (dlopen by soname: ld.so.cache, ld.so.conf, LD_LIBRARY_PATH), then reports, as one
 * JSON line, what they say at run time: the CUDA runtime and driver versions, the device count and name, NCCL's
 * version, the time of a one-rank NCCL communicator's init, and whether an allreduce on the GPU gave the sum.
 * No CUDA headers: the few entry points are declared here with their documented C signatures. Exit 0 only when
 * every step worked. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef int (*i_pi)(int *);
typedef const char *(*s_i)(int);
typedef int (*i_i)(int);
typedef int (*i_ppz)(void **, size_t);
typedef int (*i_ppzi)(void *, const void *, size_t, int);
typedef int (*i_p)(void *);
typedef int (*i_v)(void);
typedef int (*i_attr)(int *, int, int);
typedef int (*i_name)(char *, int, int);
typedef int (*nccl_init_all)(void **, int, const int *);
typedef int (*nccl_allreduce)(const void *, void *, size_t, int, int, void *, void *);
typedef const char *(*nccl_errstr)(int);

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) { printf("{\"ok\": false, \"error\": \"missing symbol %s\"}\n", name); }
    return p;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
    void *cudart = dlopen("libcudart.so.12", RTLD_NOW | RTLD_GLOBAL);
    if (!cudart) { printf("{\"ok\": false, \"error\": \"dlopen libcudart.so.12: %s\"}\n", dlerror()); return 1; }
    void *nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!nccl) { printf("{\"ok\": false, \"error\": \"dlopen libnccl.so.2: %s\"}\n", dlerror()); return 1; }
    i_pi rt_ver = (i_pi)sym(cudart, "cudaRuntimeGetVersion"), drv_ver = (i_pi)sym(cudart, "cudaDriverGetVersion");
    i_pi dev_count = (i_pi)sym(cudart, "cudaGetDeviceCount");
    s_i cuda_err = (s_i)sym(cudart, "cudaGetErrorString");
    i_i set_dev = (i_i)sym(cudart, "cudaSetDevice");
    i_ppz cmalloc = (i_ppz)sym(cudart, "cudaMalloc");
    i_ppzi cmemcpy = (i_ppzi)sym(cudart, "cudaMemcpy");
    i_p cfree = (i_p)sym(cudart, "cudaFree");
    i_v csync = (i_v)sym(cudart, "cudaDeviceSynchronize");
    i_pi nccl_ver = (i_pi)sym(nccl, "ncclGetVersion");
    nccl_init_all init_all = (nccl_init_all)sym(nccl, "ncclCommInitAll");
    nccl_allreduce allreduce = (nccl_allreduce)sym(nccl, "ncclAllReduce");
    nccl_errstr nccl_err = (nccl_errstr)sym(nccl, "ncclGetErrorString");
    i_p comm_destroy = (i_p)sym(nccl, "ncclCommDestroy");
    if (!rt_ver || !drv_ver || !dev_count || !cuda_err || !set_dev || !cmalloc || !cmemcpy || !cfree || !csync ||
        !nccl_ver || !init_all || !allreduce || !nccl_err || !comm_destroy) return 1;

    int rt = 0, drv = 0, n = 0, nv = 0, rc;
    rt_ver(&rt);
    drv_ver(&drv);
    nccl_ver(&nv);
    printf("{\"cuda_runtime\": %d, \"cuda_driver\": %d, \"nccl\": %d, ", rt, drv, nv);
    rc = dev_count(&n);
    if (rc != 0) {
        printf("\"ok\": false, \"error\": \"cudaGetDeviceCount: %s (%d)\"}\n", cuda_err(rc), rc);
        return 1;
    }
    printf("\"devices\": %d, ", n);
    if (n < 1 || (rc = set_dev(0)) != 0) {
        printf("\"ok\": false, \"error\": \"cudaSetDevice(0): %s\"}\n", n < 1 ? "no device" : cuda_err(rc));
        return 1;
    }
    void *comm = NULL;
    int devs[1] = {0};
    double t0 = now();
    rc = init_all(&comm, 1, devs);
    double init_s = now() - t0;
    if (rc != 0) { printf("\"ok\": false, \"error\": \"ncclCommInitAll: %s\"}\n", nccl_err(rc)); return 1; }
    enum { N = 1 << 20 };
    static float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)(i % 7);
    void *buf = NULL;
    if ((rc = cmalloc(&buf, sizeof host)) != 0 || (rc = cmemcpy(buf, host, sizeof host, 1)) != 0) {
        printf("\"ok\": false, \"error\": \"cudaMalloc/cudaMemcpy: %s\"}\n", cuda_err(rc));
        return 1;
    }
    rc = allreduce(buf, buf, N, 7 /* ncclFloat32 */, 0 /* ncclSum */, comm, NULL);
    if (rc != 0) { printf("\"ok\": false, \"error\": \"ncclAllReduce: %s\"}\n", nccl_err(rc)); return 1; }
    if ((rc = csync()) != 0 || (rc = cmemcpy(host, buf, sizeof host, 2)) != 0) {
        printf("\"ok\": false, \"error\": \"after allreduce: %s\"}\n", cuda_err(rc));
        return 1;
    }
    int right = 1;
    for (int i = 0; i < N; i++) right &= host[i] == (float)(i % 7);  /* one rank: the sum is the input */
    cfree(buf);
    comm_destroy(comm);
    printf("\"nccl_init_s\": %.3f, \"allreduce_ok\": %s, \"ok\": %s}\n", init_s, right ? "true" : "false",
           right ? "true" : "false");
    return right ? 0 : 1;
}
