# The layers of collie, bottom first: the one statement of the dependency
# order. Each line names a library target collie_<name> (alias collie::<name>),
# the folder that holds its sources, and the layers it builds on directly.
#
#  * collie_add_layer(<name> ...) in that folder links exactly these DEPS
#    (those that are built: cuda and nccl only with the toolkit);
#  * the layering test (test/build/check_layers.py, ctest "build: layering")
#    reads this file and fails when a source or header includes a header of a
#    layer that is not below its own (the transitive closure of DEPS).
#
# Folders that are no layer (samples/, bench/, test/, tools/) may include
# anything. A program in a subfolder of a layer (rendezvous/collie_store,
# collectives/tune) belongs to that layer.
collie_layer(base          runtime/base)
collie_layer(cuda          runtime/cuda          DEPS base)
collie_layer(rendezvous    rendezvous            DEPS base)
collie_layer(launcher      runtime/launcher      DEPS rendezvous)
collie_layer(collectives   collectives           DEPS rendezvous)
collie_layer(process_group runtime/process_group DEPS rendezvous)
collie_layer(socket        runtime/socket        DEPS process_group collectives)
collie_layer(nccl          runtime/nccl          DEPS process_group cuda)
collie_layer(api           runtime/api           DEPS socket nccl)
collie_layer(nn            nn                    DEPS api)
collie_layer(nn_cuda       nn/cuda               DEPS nn cuda)
collie_layer(torch         runtime/torch         DEPS api)
