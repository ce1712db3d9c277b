/* Placeholder entry point so the tree links while the CLI is written. */
#include <stdio.h>
int main(void) {
    fprintf(stderr, "run_recipe: under construction\n");
    return 2;
}
