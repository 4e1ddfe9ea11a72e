# The boot self-test's /bin/sh for x86_64 (clusterkit_node/node/selftest_image.py holds the assembled bytes;
# tests/node_package/test_selftest_program.py assembles this file and compares). Position independent: only
# RIP-relative addresses. Every argument that starts with '/' must be readable (faccessat R_OK), else
# "missing: <path>" and exit 1; with none missing it prints the message and exits 0.
.intel_syntax noprefix
.globl _start
_start:
    mov r12, [rsp]              # argc
    lea r13, [rsp + 8]          # argv
    xor r14d, r14d              # paths missing
    mov ebx, 1
.Lloop:
    cmp rbx, r12
    jge .Ldone
    mov r15, [r13 + rbx * 8]
    cmp byte ptr [r15], '/'
    jne .Lnext
    mov eax, 269                # faccessat(AT_FDCWD, path, R_OK, 0)
    mov edi, -100
    mov rsi, r15
    mov edx, 4
    xor r10d, r10d
    syscall
    test rax, rax
    jz .Lnext
    inc r14
    mov eax, 1                  # write(1, "missing: ", 9)
    mov edi, 1
    lea rsi, [rip + missing]
    mov edx, 9
    syscall
    mov rdx, -1                 # strlen(path)
.Llen:
    inc rdx
    cmp byte ptr [r15 + rdx], 0
    jne .Llen
    mov eax, 1                  # write(1, path, len)
    mov edi, 1
    mov rsi, r15
    syscall
    mov eax, 1                  # write(1, "\n", 1)
    mov edi, 1
    lea rsi, [rip + newline]
    mov edx, 1
    syscall
.Lnext:
    inc rbx
    jmp .Lloop
.Ldone:
    test r14, r14
    jnz .Lfail
    mov eax, 1                  # write(1, message, len)
    mov edi, 1
    lea rsi, [rip + message]
    mov edx, message_end - message
    syscall
    mov eax, 60                 # exit(0)
    xor edi, edi
    syscall
.Lfail:
    mov eax, 60                 # exit(1)
    mov edi, 1
    syscall
missing: .ascii "missing: "
newline: .ascii "\n"
message: .ascii "clusterkit-selftest: container started\n"
message_end:
