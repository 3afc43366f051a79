"""The object files of a set of cc targets and of every cc_library below them,
for tests that inspect what was compiled (tests/layering_check.sh)."""

def _objects_impl(ctx):
    objs = []
    for dep in ctx.attr.deps:
        # a target's own objects, which for a cc_binary come only this way
        if OutputGroupInfo in dep and hasattr(dep[OutputGroupInfo], "compilation_outputs"):
            objs.extend(dep[OutputGroupInfo].compilation_outputs.to_list())
        if CcInfo in dep:
            for li in dep[CcInfo].linking_context.linker_inputs.to_list():
                for lib in li.libraries:
                    objs.extend(lib.pic_objects or lib.objects)
    files = depset([o for o in objs if o.extension == "o" and not o.owner.workspace_name])
    return [DefaultInfo(files = files, runfiles = ctx.runfiles(transitive_files = files))]

cc_objects = rule(
    implementation = _objects_impl,
    attrs = {"deps": attr.label_list()},
)
