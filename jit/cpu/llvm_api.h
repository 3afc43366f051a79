/* llvm_api.h — the LLVM C API functions the LLVM code generator uses, as a
 * table resolved at run time from libLLVM (dlopen + dlsym), so that kiln
 * neither links against LLVM nor needs it installed unless
 * KILN_CPU_COMPILER=llvm asks for it. Private to the llvm_* files. */
#ifndef KILN_JIT_CPU_LLVM_API_H
#define KILN_JIT_CPU_LLVM_API_H

#include <stddef.h>
#include <stdint.h>

#include "lower/lower.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

/* X(name) for every function of the table. */
#define JIT_LLVM_FUNCTIONS(X)                                                                      \
    X(LLVMModuleCreateWithNameInContext)                                                           \
    X(LLVMContextSetDiagnosticHandler)                                                             \
    X(LLVMDisposeModule)                                                                           \
    X(LLVMSetTarget)                                                                               \
    X(LLVMSetModuleDataLayout)                                                                     \
    X(LLVMPrintModuleToString)                                                                     \
    X(LLVMVerifyModule)                                                                            \
    X(LLVMDisposeMessage)                                                                          \
    X(LLVMInt1TypeInContext)                                                                       \
    X(LLVMInt8TypeInContext)                                                                       \
    X(LLVMInt16TypeInContext)                                                                      \
    X(LLVMInt32TypeInContext)                                                                      \
    X(LLVMInt64TypeInContext)                                                                      \
    X(LLVMFloatTypeInContext)                                                                      \
    X(LLVMDoubleTypeInContext)                                                                     \
    X(LLVMVoidTypeInContext)                                                                       \
    X(LLVMPointerType)                                                                             \
    X(LLVMFunctionType)                                                                            \
    X(LLVMVectorType)                                                                              \
    X(LLVMArrayType)                                                                               \
    X(LLVMTypeOf)                                                                                  \
    X(LLVMGetTypeKind)                                                                             \
    X(LLVMGetElementType)                                                                          \
    X(LLVMGetVectorSize)                                                                           \
    X(LLVMGetIntTypeWidth)                                                                         \
    X(LLVMConstInt)                                                                                \
    X(LLVMConstReal)                                                                               \
    X(LLVMConstNull)                                                                               \
    X(LLVMConstVector)                                                                             \
    X(LLVMGetUndef)                                                                                \
    X(LLVMAddFunction)                                                                             \
    X(LLVMGetNamedFunction)                                                                        \
    X(LLVMSetLinkage)                                                                              \
    X(LLVMGetParam)                                                                                \
    X(LLVMAppendBasicBlockInContext)                                                               \
    X(LLVMGetInsertBlock)                                                                          \
    X(LLVMAddAttributeAtIndex)                                                                     \
    X(LLVMCreateEnumAttribute)                                                                     \
    X(LLVMGetEnumAttributeKindForName)                                                             \
    X(LLVMCreateBuilderInContext)                                                                  \
    X(LLVMDisposeBuilder)                                                                          \
    X(LLVMPositionBuilderAtEnd)                                                                    \
    X(LLVMBuildAdd)                                                                                \
    X(LLVMBuildSub)                                                                                \
    X(LLVMBuildMul)                                                                                \
    X(LLVMBuildSDiv)                                                                               \
    X(LLVMBuildSRem)                                                                               \
    X(LLVMBuildUDiv)                                                                               \
    X(LLVMBuildURem)                                                                               \
    X(LLVMBuildAnd)                                                                                \
    X(LLVMBuildOr)                                                                                 \
    X(LLVMBuildXor)                                                                                \
    X(LLVMBuildShl)                                                                                \
    X(LLVMBuildLShr)                                                                               \
    X(LLVMBuildICmp)                                                                               \
    X(LLVMBuildFCmp)                                                                               \
    X(LLVMBuildFAdd)                                                                               \
    X(LLVMBuildFSub)                                                                               \
    X(LLVMBuildFMul)                                                                               \
    X(LLVMBuildFDiv)                                                                               \
    X(LLVMBuildFNeg)                                                                               \
    X(LLVMBuildSelect)                                                                             \
    X(LLVMBuildZExt)                                                                               \
    X(LLVMBuildSExt)                                                                               \
    X(LLVMBuildTrunc)                                                                              \
    X(LLVMBuildFPExt)                                                                              \
    X(LLVMBuildFPTrunc)                                                                            \
    X(LLVMBuildSIToFP)                                                                             \
    X(LLVMBuildUIToFP)                                                                             \
    X(LLVMBuildFPToSI)                                                                             \
    X(LLVMBuildFPToUI)                                                                             \
    X(LLVMBuildBitCast)                                                                            \
    X(LLVMBuildLoad2)                                                                              \
    X(LLVMBuildStore)                                                                              \
    X(LLVMSetVolatile)                                                                             \
    X(LLVMBuildInBoundsGEP2)                                                                       \
    X(LLVMBuildAlloca)                                                                             \
    X(LLVMBuildCall2)                                                                              \
    X(LLVMBuildBr)                                                                                 \
    X(LLVMBuildCondBr)                                                                             \
    X(LLVMBuildRetVoid)                                                                            \
    X(LLVMBuildRet)                                                                                \
    X(LLVMBuildInsertElement)                                                                      \
    X(LLVMBuildExtractElement)                                                                     \
    X(LLVMBuildShuffleVector)                                                                      \
    X(LLVMSetAlignment)                                                                            \
    X(LLVMMDStringInContext2)                                                                      \
    X(LLVMMDNodeInContext2)                                                                        \
    X(LLVMMetadataAsValue)                                                                         \
    X(LLVMValueAsMetadata)                                                                         \
    X(LLVMSetMetadata)                                                                             \
    X(LLVMGetMDKindIDInContext)                                                                    \
    X(LLVMTemporaryMDNode)                                                                         \
    X(LLVMMetadataReplaceAllUsesWith)                                                              \
    X(LLVMLookupIntrinsicID)                                                                       \
    X(LLVMGetIntrinsicDeclaration)                                                                 \
    X(LLVMIntrinsicGetType)                                                                        \
    X(LLVMGetDefaultTargetTriple)                                                                  \
    X(LLVMGetHostCPUName)                                                                          \
    X(LLVMGetHostCPUFeatures)                                                                      \
    X(LLVMGetTargetFromTriple)                                                                     \
    X(LLVMCreateTargetMachine)                                                                     \
    X(LLVMDisposeTargetMachine)                                                                    \
    X(LLVMCreateTargetDataLayout)                                                                  \
    X(LLVMDisposeTargetData)                                                                       \
    X(LLVMRunPasses)                                                                               \
    X(LLVMCreatePassBuilderOptions)                                                                \
    X(LLVMDisposePassBuilderOptions)                                                               \
    X(LLVMPassBuilderOptionsSetLoopVectorization)                                                  \
    X(LLVMPassBuilderOptionsSetSLPVectorization)                                                   \
    X(LLVMPassBuilderOptionsSetLoopUnrolling)                                                      \
    X(LLVMPassBuilderOptionsSetLoopInterleaving)                                                   \
    X(LLVMOrcCreateNewThreadSafeContext)                                                           \
    X(LLVMOrcThreadSafeContextGetContext)                                                          \
    X(LLVMOrcDisposeThreadSafeContext)                                                             \
    X(LLVMOrcCreateNewThreadSafeModule)                                                            \
    X(LLVMOrcDisposeThreadSafeModule)                                                              \
    X(LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine)                                       \
    X(LLVMOrcCreateLLJITBuilder)                                                                   \
    X(LLVMOrcLLJITBuilderSetJITTargetMachineBuilder)                                               \
    X(LLVMOrcDisposeLLJITBuilder)                                                                  \
    X(LLVMOrcCreateLLJIT)                                                                          \
    X(LLVMOrcDisposeLLJIT)                                                                         \
    X(LLVMOrcLLJITGetMainJITDylib)                                                                 \
    X(LLVMOrcLLJITMangleAndIntern)                                                                 \
    X(LLVMOrcAbsoluteSymbols)                                                                      \
    X(LLVMOrcJITDylibDefine)                                                                       \
    X(LLVMOrcDisposeMaterializationUnit)                                                           \
    X(LLVMOrcLLJITAddLLVMIRModule)                                                                 \
    X(LLVMOrcLLJITLookup)                                                                          \
    X(LLVMGetErrorMessage)                                                                         \
    X(LLVMDisposeErrorMessage)

typedef struct jit_llvm_api {
#define JIT_LLVM_MEMBER(name) __typeof__(name) *name;
    JIT_LLVM_FUNCTIONS(JIT_LLVM_MEMBER)
#undef JIT_LLVM_MEMBER
    /* The native target's initialisers (their names depend on the host). */
    void (*init_info)(void);
    void (*init_target)(void);
    void (*init_mc)(void);
    void (*init_asm_printer)(void);
} jit_llvm_api;

/* The table, libLLVM loaded and the native target initialised on first use;
 * NULL with a message when LLVM is not installed or lacks a function. */
const jit_llvm_api *jit_llvm_api_get(char *msg, size_t cap);

/* Builds the module of p's kernels in cx (llvm_render.c): kernel k is the
 * external function named k's name. vbytes is the width of the host's vector
 * registers, which sizes the matmul register tile. NULL with a message. */
LLVMModuleRef jit_llvm_render(const jit_llvm_api *L, LLVMContextRef cx, const lower_program *p,
                              const lower_plan *plans, char *msg, size_t cap);

/* Runs body over [0, n) split into one contiguous range per thread
 * (llvm_runtime.c, OpenMP); generated kernels call it by this name. */
void jit_llvm_parallel_for(void (*body)(void *ctx, int64_t lo, int64_t hi), void *ctx, int64_t n,
                           int nthreads);

#endif /* KILN_JIT_CPU_LLVM_API_H */
