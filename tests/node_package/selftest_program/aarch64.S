// The boot self-test's /bin/sh for aarch64 (clusterkit_node/node/selftest_image.py holds the assembled bytes;
// tests/node_package/test_selftest_program.py assembles this file and compares). Position independent: only
// PC-relative addresses. Every argument that starts with '/' must be readable (faccessat R_OK), else
// "missing: <path>" and exit 1; with none missing it prints the message and exits 0.
.globl _start
_start:
    ldr x19, [sp]               // argc
    add x20, sp, #8             // argv
    mov x21, #0                 // paths missing
    mov x22, #1
loop:
    cmp x22, x19
    b.ge done
    ldr x23, [x20, x22, lsl #3]
    ldrb w0, [x23]
    cmp w0, #'/'
    b.ne next
    mov x0, #-100               // faccessat(AT_FDCWD, path, R_OK, 0)
    mov x1, x23
    mov x2, #4
    mov x3, #0
    mov x8, #48
    svc #0
    cbz x0, next
    add x21, x21, #1
    mov x0, #1                  // write(1, "missing: ", 9)
    adr x1, missing
    mov x2, #9
    mov x8, #64
    svc #0
    mov x2, #0                  // strlen(path)
len:
    ldrb w3, [x23, x2]
    cbz w3, len_done
    add x2, x2, #1
    b len
len_done:
    mov x0, #1                  // write(1, path, len)
    mov x1, x23
    mov x8, #64
    svc #0
    mov x0, #1                  // write(1, "\n", 1)
    adr x1, newline
    mov x2, #1
    mov x8, #64
    svc #0
next:
    add x22, x22, #1
    b loop
done:
    cbnz x21, fail
    mov x0, #1                  // write(1, message, len)
    adr x1, message
    mov x2, #(message_end - message)
    mov x8, #64
    svc #0
    mov x0, #0                  // exit(0)
    mov x8, #93
    svc #0
fail:
    mov x0, #1                  // exit(1)
    mov x8, #93
    svc #0
missing: .ascii "missing: "
newline: .ascii "\n"
message: .ascii "clusterkit-selftest: container started\n"
message_end:
